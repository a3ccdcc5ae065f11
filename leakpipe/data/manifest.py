"""Discovering recordings: a manifest CSV, or a folder ``<root>/<CLASS>/*.wav``.

A manifest has the columns ``path,class,group`` (more columns are kept but unused); paths are
relative to the manifest's folder. A folder without a manifest takes the class from the
sub-folder name (as the original system did) and uses each recording as its own group.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from leakpipe.constants import AUDIO_SUFFIXES, MANIFEST_COLUMNS, MANIFEST_NAME
from leakpipe.errors import DataError


@dataclass(frozen=True)
class Recording:
    """One source recording: where it is, its class and its group (site / sensor)."""

    path: Path
    recording_id: str
    label: str
    group: str


def discover(source: Path) -> list[Recording]:
    """Recordings named by ``source`` (manifest file, folder with manifest, or class folders)."""
    source = Path(source)
    if source.is_file():
        return read_manifest(source)
    if not source.is_dir():
        raise DataError(f"{source}: build.source is neither a manifest file nor a folder")
    if (source / MANIFEST_NAME).is_file():
        return read_manifest(source / MANIFEST_NAME)
    return scan_class_folders(source)


def read_manifest(path: Path) -> list[Recording]:
    root = path.parent
    try:
        with path.open(newline="") as handle:
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
        rel = row["path"].strip()
        recordings.append(Recording(root / rel, rel, row["class"].strip(), row["group"].strip()))
    _check_unique(path, recordings)
    return recordings


def scan_class_folders(root: Path) -> list[Recording]:
    recordings = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        for file in sorted(folder.rglob("*")):
            if file.is_file() and file.suffix.lower() in AUDIO_SUFFIXES:
                rel = file.relative_to(root).as_posix()
                recordings.append(Recording(file, rel, folder.name, rel))
    if not recordings:
        raise DataError(f"{root}: no {MANIFEST_NAME} and no <CLASS>/*.wav recordings found")
    return recordings


def _check_unique(path: Path, recordings: list[Recording]) -> None:
    seen: set[str] = set()
    for rec in recordings:
        if rec.recording_id in seen:
            raise DataError(f"{path}: recording {rec.recording_id!r} is listed twice")
        seen.add(rec.recording_id)
