"""The built splits as one table of recordings, and one fold's split files written from it.

Cross-validation re-uses the features `build` wrote (no recording is decoded again): the train,
val and test files together are the data set, a recording is a run of rows in one of them, and
a fold's train / val / test files are copies of those rows, so the CNN and the baselines read
them exactly as they read the stage splits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leakpipe.config import FeatureConfig
from leakpipe.data.reader import open_split
from leakpipe.data.writer import SplitWriter, StatsColumns
from leakpipe.errors import DataError

CHUNK_MB = 1.0   # fold files: the same chunking as build's default


@dataclass(frozen=True)
class Recordings:
    """Every recording of the pooled splits, in split then row order."""

    paths: tuple[Path, ...]          # the source split files
    source: np.ndarray               # (R,) int index into ``paths``
    start: np.ndarray                # (R,) first row in its source
    stop: np.ndarray                 # (R,) one past its last row
    recording_id: np.ndarray         # (R,) str
    group: np.ndarray                # (R,) str
    label: np.ndarray                # (R,) int index into ``class_names``
    class_names: tuple[str, ...]
    features: FeatureConfig
    dtype: str

    def __len__(self) -> int:
        return len(self.recording_id)

    @property
    def label_names(self) -> np.ndarray:
        return np.asarray(self.class_names)[self.label]


def pool_recordings(paths: Sequence[Path]) -> Recordings:
    """Read ids, groups and labels of every split file; they must share classes and features."""
    parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    first = None
    for i, path in enumerate(paths):
        with open_split(path) as split:
            facts = (split.class_names, split.features, split.mel.dtype.name,
                     split.stats_names if split.has_stats else ())
            if first is None:
                first = facts
            elif facts[:2] != first[:2] or facts[3] != first[3]:
                raise DataError(f"{path}: classes, feature config or recording statistics "
                                f"differ from {paths[0]}")
            ids, groups, labels = split.recording_ids, split.groups, split.labels
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else \
            np.zeros(0, dtype=np.int64)
        stops = np.r_[starts[1:], len(ids)].astype(np.int64)
        parts.append((i, starts, stops, ids[starts], groups[starts], labels[starts]))
    if first is None:
        raise DataError("no split files to cross-validate")
    recordings = Recordings(
        paths=tuple(Path(p) for p in paths),
        source=np.concatenate([np.full(len(p[1]), p[0]) for p in parts]),
        start=np.concatenate([p[1] for p in parts]), stop=np.concatenate([p[2] for p in parts]),
        recording_id=np.concatenate([p[3] for p in parts]),
        group=np.concatenate([p[4] for p in parts]),
        label=np.concatenate([p[5] for p in parts]),
        class_names=first[0], features=first[1], dtype=first[2])
    _check_unique(recordings)
    return recordings


def _check_unique(recordings: Recordings) -> None:
    ids, counts = np.unique(recordings.recording_id, return_counts=True)
    if (counts > 1).any():
        raise DataError(f"recording {ids[counts > 1][0]!r} appears in more than one place of "
                        f"{[str(p) for p in recordings.paths]}; rebuild the splits")


def write_fold_split(recordings: Recordings, rows: np.ndarray, path: Path, role: str) -> Path:
    """Copy the recordings ``rows`` (indices into ``recordings``) into one split file."""
    with ExitStack() as stack:
        readers = [stack.enter_context(open_split(p)) for p in recordings.paths]
        first = readers[0]
        stats = StatsColumns(first.stats_names, first.stats_config) if first.has_stats else None
        writer = stack.enter_context(SplitWriter(
            path, role, recordings.features, recordings.class_names, dtype=recordings.dtype,
            chunk_mb=CHUNK_MB, stats=stats))
        for r in np.sort(rows):
            reader = readers[recordings.source[r]]
            lo, hi = recordings.start[r], recordings.stop[r]
            extra = ({"stats": reader.recording_stats[lo], "rate": int(reader.recording_rates[lo])}
                     if stats is not None else {})
            writer.append(reader.mel[lo:hi], int(recordings.label[r]),
                          str(recordings.recording_id[r]), str(recordings.group[r]), **extra)
    return path


def write_fold(recordings: Recordings, roles: Mapping[str, np.ndarray],
               directory: Path) -> dict[str, Path]:
    """``directory/{train,val,test}.h5`` of one fold; returns role -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    return {role: write_fold_split(recordings, rows, directory / f"{role}.h5", role)
            for role, rows in roles.items()}
