"""Folder sources: which files are pieces of one recording; the groups `build.group_by` gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakpipe.data.manifest import discover, folder_group, recording_stem
from leakpipe.errors import DataError


@pytest.mark.parametrize("name, stem", [
    ("x.s1.wav", "x"),
    ("x.s2.wav", "x"),
    ("x_part3.wav", "x"),
    ("x-part12.flac", "x"),
    ("x_s1.wav", "x"),
    ("x-s4.ogg", "x"),
    ("x.part2.wav", "x"),
    ("X.S1.WAV", "X"),                 # the suffix in any case; the stem keeps its own
    ("pipe_A_Part07.wav", "pipe_A"),
    ("x_S01.wav", "x"),                # leading zeros
    ("a.b.s2.wav", "a.b"),             # only the last piece suffix is removed
    ("x.s1.s2.wav", "x.s1"),
    ("x.wav", "x"),                    # no suffix: a recording of its own
    ("s1.wav", "s1"),                  # a suffix needs a stem before it
    ("x_s1a.wav", "x_s1a"),            # digits must end the name
    ("pump_parts3.wav", "pump_parts3"),
    ("x_sensor2.wav", "x_sensor2"),
    ("x_2.wav", "x_2"),
    ("x s1.wav", "x s1"),              # a space is no separator
])
def test_recording_stem(name: str, stem: str) -> None:
    assert recording_stem(name) == stem


@pytest.mark.parametrize("rel, group_by, group", [
    ("LEAK/x.s1.wav", "stem", "x"),
    ("NORMAL/x_part2.wav", "stem", "x"),          # the class folder is not part of the group
    ("LEAK/site3/x.s1.wav", "stem", "site3/x"),
    ("LEAK/site3/x.s1.wav", "file", "LEAK/site3/x.s1.wav"),
    ("LEAK/x.s1.wav", "file", "LEAK/x.s1.wav"),
    ("LEAK/site3/x.s1.wav", "folder", "site3"),
    ("NORMAL/site3/sensor2/y.wav", "folder", "site3"),
])
def test_folder_group(rel: str, group_by: str, group: str) -> None:
    assert folder_group(rel, group_by) == group


def test_folder_grouping_needs_a_folder_below_the_class() -> None:
    with pytest.raises(DataError, match=r"^LEAK/x\.wav: build\.group_by is 'folder'"):
        folder_group("LEAK/x.wav", "folder")


def _touch(root: Path, *rels: str) -> None:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"RIFF")


def test_discover_groups_pieces_and_sites(tmp_path: Path) -> None:
    _touch(tmp_path, "LEAK/a/x.s1.wav", "LEAK/a/x.s2.wav", "LEAK/b/y.wav", "NORMAL/a/z_part1.wav",
           "NORMAL/a/notes.txt")
    by_stem = {r.recording_id: r.group for r in discover(tmp_path)}
    assert by_stem == {"LEAK/a/x.s1.wav": "a/x", "LEAK/a/x.s2.wav": "a/x", "LEAK/b/y.wav": "b/y",
                       "NORMAL/a/z_part1.wav": "a/z"}
    by_folder = {r.recording_id: r.group for r in discover(tmp_path, "folder")}
    assert by_folder == {"LEAK/a/x.s1.wav": "a", "LEAK/a/x.s2.wav": "a", "LEAK/b/y.wav": "b",
                         "NORMAL/a/z_part1.wav": "a"}


def test_manifest_groups_win_over_group_by(tmp_path: Path) -> None:
    _touch(tmp_path, "LEAK/x.s1.wav", "LEAK/x.s2.wav")
    (tmp_path / "manifest.csv").write_text(
        "path,class,group\nLEAK/x.s1.wav,LEAK,g1\nLEAK/x.s2.wav,LEAK,g2\n")
    assert [r.group for r in discover(tmp_path, "stem")] == ["g1", "g2"]
