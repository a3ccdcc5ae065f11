"""Discovering recordings: a manifest CSV, or a folder ``<root>/<CLASS>/*.wav``.

A manifest has the columns ``path,class,group`` (more columns are kept but unused); paths are
relative to the manifest's folder. A folder without a manifest takes the class from the
sub-folder name (as the original system did) and the group from ``group_by``:

- ``stem``: files that are pieces of one recording share a group. A piece is named
  ``<stem><sep><tag><N>.<ext>`` with ``<sep>`` one of ``.``, ``_``, ``-``, ``<tag>`` ``s`` or
  ``part`` (any case) and ``<N>`` digits: ``x.s1.wav``, ``x_part2.wav``, ``x-PART3.flac`` all
  belong to ``x``. The group is the stem with the sub-folders below the class folder
  (``<CLASS>/<site>/x.s1.wav`` -> ``<site>/x``), so pieces filed under different classes
  still share a group; a name without a piece suffix is a recording of its own.
- ``file``: every file is its own group (its path below the root).
- ``folder``: the folder right below the class folder (``<root>/<CLASS>/<site>/*.wav`` ->
  ``<site>``), so that no site is in two splits.

Either way one file listed twice, or a byte-identical copy of it, never becomes two recordings
(``leakpipe.data.identity``; ``build.duplicates``), and class and group names are read in one
spelling (``leakpipe.names``: stripped, Unicode NFC, classes in upper case).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path, PurePosixPath

from leakpipe.constants import (
    AUDIO_SUFFIXES,
    MANIFEST_COLUMNS,
    MANIFEST_NAME,
    UNREAD_AUDIO_SUFFIXES,
)
from leakpipe.data.identity import Recording, unique_recordings
from leakpipe.errors import DataError
from leakpipe.files import listed_entries
from leakpipe.names import class_name, group_name

GROUP_BY: tuple[str, ...] = ("stem", "file", "folder")  # build.group_by, folder sources only
# <stem><sep><tag><N>: a numbered piece of recording <stem> (the extension already removed)
_PIECE = re.compile(r"(?P<stem>.+?)[._-](?:s|part)\d+", re.IGNORECASE)


def recording_stem(name: str) -> str:
    """The recording a file is a piece of: ``x.s1.wav`` / ``x_part2.wav`` -> ``x``."""
    stem = PurePosixPath(name).stem
    piece = _PIECE.fullmatch(stem)
    return piece["stem"] if piece else stem


def folder_group(rel: str, group_by: str) -> str:
    """Group of a file at ``rel`` (``<CLASS>/.../<file>``, relative to the root)."""
    parts = PurePosixPath(rel).parts
    if group_by == "file":
        return rel
    if group_by == "stem":
        return "/".join([*parts[1:-1], recording_stem(parts[-1])])
    if group_by == "folder":
        if len(parts) < 3:
            raise DataError(f"{rel}: build.group_by is 'folder' but the file sits directly in "
                            "its class folder; expected <root>/<CLASS>/<group>/<file>")
        return parts[1]
    raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")


def discover(source: Path, group_by: str = "stem",
             duplicates: str = "refuse") -> list[Recording]:
    """Recordings named by ``source`` (manifest file, folder with manifest, or class folders),
    each once: a file named twice or copied is refused, or with ``duplicates`` = ``drop``
    kept once when its rows agree on class and group (``leakpipe.data.identity``).

    ``group_by`` applies to class folders only; a manifest's ``group`` column always wins.
    """
    manifest = manifest_of(source)
    if manifest is not None:
        return unique_recordings(read_manifest(manifest), manifest, duplicates)
    return unique_recordings(scan_class_folders(Path(source), group_by), Path(source),
                             duplicates)


def manifest_of(source: Path) -> Path | None:
    """The manifest ``source`` names (itself, or its ``manifest.csv``); None for class folders."""
    source = Path(source)
    if source.is_file():
        return source
    if not source.is_dir():
        raise DataError(f"{source}: build.source is neither a manifest file nor a folder")
    if (source / MANIFEST_NAME).is_file():
        return source / MANIFEST_NAME
    return None


def read_manifest(path: Path) -> list[Recording]:
    """The rows of a manifest CSV, paths joined to its folder. ``utf-8-sig``: Excel's "CSV
    UTF-8" starts the file with a byte-order mark, which would otherwise be read as part of
    the first column's name (and ``path`` reported missing)."""
    root = path.parent
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in MANIFEST_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"{path}: manifest column {missing[0]!r} missing; "
                                f"required: {','.join(MANIFEST_COLUMNS)}")
            rows = list(reader)
    except UnicodeDecodeError:
        raise DataError(f"{path}: manifest is not UTF-8 text") from None
    recordings = []
    for line, row in enumerate(rows, start=2):
        empty = [c for c in MANIFEST_COLUMNS if not (row.get(c) or "").strip()]
        if empty:
            raise DataError(f"{path}: line {line}: column {empty[0]!r} is empty")
        if all(row[c].strip().lower() == c for c in MANIFEST_COLUMNS):
            raise DataError(f"{path}: line {line} repeats the header row "
                            f"({','.join(MANIFEST_COLUMNS)}): two manifests pasted together? "
                            "Delete that line")
        rel = row["path"].strip()
        recordings.append(Recording(root / rel, rel, class_name(row["class"]),
                                    group_name(row["group"])))
    _check_unique(path, recordings)
    return recordings


def scan_class_folders(root: Path, group_by: str = "stem") -> list[Recording]:
    """Every entry with an audio suffix below a class folder: one that is not a file (a
    folder, a symlink loop) or not in a format leakpipe reads (``.mp3`` ...) is listed too,
    so that build reports it as unusable with its reason rather than leaving it out without a
    word (as predict gives it an ``unusable`` row)."""
    recordings = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        for file in listed_entries(folder, (*AUDIO_SUFFIXES, *UNREAD_AUDIO_SUFFIXES)):
            rel = file.relative_to(root).as_posix()
            group = group_name(folder_group(rel, group_by))
            recordings.append(Recording(file, rel, class_name(folder.name), group))
    if not recordings:
        raise DataError(f"{root}: no {MANIFEST_NAME} and no <CLASS>/*.wav recordings found")
    return recordings


def _check_unique(path: Path, recordings: list[Recording]) -> None:
    seen: set[str] = set()
    for rec in recordings:
        if rec.recording_id in seen:
            raise DataError(f"{path}: recording {rec.recording_id!r} is listed twice")
        seen.add(rec.recording_id)
