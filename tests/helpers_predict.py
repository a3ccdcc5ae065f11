"""`leakpipe predict`'s two CSVs read back as one text row per recording, as tests compare them.

predict writes one short row per recording (``CSV_COLUMNS``) and the timeline beside it, one
row per long segment in time order (``TIMELINE_COLUMNS``, ``timeline_path``). Tests that
compare whole rows (two runs, a file and an MLflow URI, parts and the whole file) read both
back here into the full row (``COLUMNS``), every value as the CSV text, the timeline fields
space-separated.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leakpipe.predict.rows import CSV_COLUMNS, TIMELINE, TIMELINE_COLUMNS, timeline_path

# the row's timeline field -> the timeline CSV's column
TIMELINE_FIELDS = dict(zip(TIMELINE, ("start_s", "clip", "long_prob"), strict=True))


def text_row(row: Mapping[str, Any]) -> dict[str, str]:
    """A row in memory (``result_row``) as the CSVs give it back."""
    return {key: " ".join(map(str, value)) if key in TIMELINE else str(value)
            for key, value in row.items()}


def _read(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == columns
        return list(reader)


def read_predictions(out: Path) -> dict[str, dict[str, str]]:
    """Both files of the predict run into ``out`` as full text rows, by file name."""
    segments: dict[str, list[dict[str, str]]] = defaultdict(list)
    for line in _read(timeline_path(out), TIMELINE_COLUMNS):
        segments[line["path"]].append(line)
    rows = {}
    for row in _read(out, CSV_COLUMNS):
        lines = segments.pop(row["path"], [])
        row.update({field: " ".join(line[column] for line in lines)
                    for field, column in TIMELINE_FIELDS.items()})
        rows[Path(row["path"]).name] = row
    assert not segments, f"timeline rows without a row: {sorted(segments)}"
    return rows
