"""Folder sources: which files are pieces of one recording; the groups `build.group_by` gives.
Manifests: a byte-order mark; one file (or a byte-identical copy) never two recordings."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakpipe.data.identity import HEAD_BYTES, identities
from leakpipe.data.manifest import Recording, discover, folder_group, recording_stem
from leakpipe.errors import DataError
from leakpipe.files import file_sha256


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
        (root / rel).write_bytes(b"RIFF" + rel.encode())   # no two alike: copies are refused


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


# -- one recording, one row (issue #35: a recording in two folds) -------------------------------

def _manifest(root: Path, *rows: str, bom: bool = False) -> Path:
    path = root / "manifest.csv"
    path.write_text("path,class,group\n" + "".join(f"{r}\n" for r in rows),
                    encoding="utf-8-sig" if bom else "utf-8")
    return path


def _files(root: Path, contents: dict[str, bytes]) -> None:
    for rel, data in contents.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


AUDIO_A, AUDIO_B = b"RIFF" + bytes(range(200)), b"RIFF" + bytes(range(1, 201))


def test_a_manifest_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    _files(tmp_path, {"LEAK/a.wav": AUDIO_A, "NOLEAK/b.wav": AUDIO_B})
    manifest = _manifest(tmp_path, "LEAK/a.wav,LEAK,s1", "NOLEAK/b.wav,NOLEAK,s2", bom=True)
    assert manifest.read_bytes().startswith(b"\xef\xbb\xbfpath,")     # Excel's "CSV UTF-8"
    assert [(r.recording_id, r.label, r.group) for r in discover(manifest)] == [
        ("LEAK/a.wav", "LEAK", "s1"), ("NOLEAK/b.wav", "NOLEAK", "s2")]


@pytest.mark.parametrize(("second", "message"), [
    ("./LEAK/a.wav,LEAK,s2", r"'LEAK/a\.wav' \(LEAK, group s1\) and '\./LEAK/a\.wav' \(LEAK, "
                            r"group s2\) are the same file: one recording under two groups"),
    ("NOLEAK/../LEAK/a.wav,NOLEAK,s1", r"'NOLEAK/\.\./LEAK/a\.wav' \(NOLEAK, group s1\) are "
                                       r"the same file: one recording under two classes"),
    ("link.wav,NOLEAK,s3", "the same file: one recording under two classes and two groups"),
    ("copy/a-copy.wav,LEAK,s2", r"'copy/a-copy\.wav' \(LEAK, group s2\) are byte-identical "
                                "files: one recording under two groups"),
])
def test_one_recording_under_two_groups_or_classes_is_refused_naming_both_rows(
        tmp_path: Path, second: str, message: str) -> None:
    _files(tmp_path, {"LEAK/a.wav": AUDIO_A, "NOLEAK/b.wav": AUDIO_B,
                      "copy/a-copy.wav": AUDIO_A})
    (tmp_path / "NOLEAK" / "x").mkdir()
    (tmp_path / "link.wav").symlink_to(tmp_path / "LEAK" / "a.wav")
    manifest = _manifest(tmp_path, "LEAK/a.wav,LEAK,s1", "NOLEAK/b.wav,NOLEAK,s4", second)
    for duplicates in ("refuse", "drop"):          # no option makes two labels right
        with pytest.raises(DataError, match=message) as info:
            discover(manifest, duplicates=duplicates)
        assert str(info.value).startswith(f"{manifest}: ") and "\n" not in str(info.value)


def test_a_repeat_within_one_class_and_group_is_refused_or_dropped(tmp_path: Path) -> None:
    _files(tmp_path, {"LEAK/a.wav": AUDIO_A, "LEAK/a2.wav": AUDIO_A, "NOLEAK/b.wav": AUDIO_B})
    manifest = _manifest(tmp_path, "LEAK/a.wav,LEAK,s1", "NOLEAK/b.wav,NOLEAK,s2",
                         "LEAK/./a.wav,LEAK,s1", "LEAK/a2.wav,LEAK,s1")
    with pytest.raises(DataError, match=r"'LEAK/a\.wav' and 'LEAK/\./a\.wav' \(LEAK, group s1\) "
                                        r"are the same file, listed twice; .*build\.duplicates: "
                                        "drop"):
        discover(manifest)
    kept = discover(manifest, duplicates="drop")
    assert [r.recording_id for r in kept] == ["LEAK/a.wav", "NOLEAK/b.wav"]


def test_a_copy_in_a_class_folder_is_caught_too(tmp_path: Path) -> None:
    _files(tmp_path, {"LEAK/a.wav": AUDIO_A, "NORMAL/renamed.wav": AUDIO_A,
                      "NORMAL/b.wav": AUDIO_B})
    with pytest.raises(DataError, match=r"'LEAK/a\.wav' \(LEAK, group a\) and "
                                        r"'NORMAL/renamed\.wav' \(NORMAL, group renamed\) are "
                                        "byte-identical files"):
        discover(tmp_path)


def test_only_files_sharing_size_and_head_are_hashed(tmp_path: Path) -> None:
    """The keys say which rows were hashed whole: a unique size, or a unique head at one
    size, needs no hash; same size and head with another tail is hashed and kept apart."""
    head = bytes(HEAD_BYTES)
    _files(tmp_path, {"unique.wav": b"x" * 10, "head1.wav": b"1" + head, "head2.wav": b"2" + head,
                      "tail1.wav": head + b"1", "tail2.wav": head + b"2", "copy.wav": head + b"2"})
    recs = [Recording(tmp_path / n, n, "LEAK", n) for n in
            ("unique.wav", "head1.wav", "head2.wav", "tail1.wav", "tail2.wav", "copy.wav",
             "missing.wav")]
    keys = identities(recs)
    assert [k.split(":")[0] for k in keys] == ["path", "path", "path", "sha256", "sha256",
                                               "sha256", "row"]
    assert len(set(keys)) == 6 and keys[4] == keys[5]
    assert keys[5] == f"sha256:{file_sha256(tmp_path / 'copy.wav')}"


def test_unreadable_rows_are_left_for_build_to_report(tmp_path: Path) -> None:
    _files(tmp_path, {"LEAK/a.wav": b"", "LEAK/b.wav": b"", "LEAK/c.wav": AUDIO_A})
    (tmp_path / "LEAK" / "dir.wav").mkdir()
    manifest = _manifest(tmp_path, "LEAK/a.wav,LEAK,s1", "LEAK/b.wav,LEAK,s5",   # empty
                         "LEAK/gone.wav,LEAK,s2", "LEAK/gone2.wav,LEAK,s3", "LEAK/dir.wav,LEAK,s4",
                         "LEAK/c.wav,LEAK,s6", "nowhere/../LEAK/c.wav,LEAK,s7")  # cannot open
    assert len(discover(manifest)) == 7
