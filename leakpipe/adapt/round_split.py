"""The next round's training split: the labelled train split plus pseudo-labelled pool rows.

``write_round_split`` copies the labelled train split row for row and appends the
pseudo-labelled rows of the pool (``leakpipe.adapt.pseudo``: a recording's kept long segments
packed into rows), at most ``adapt.pseudo_per_labelled`` of them per labelled row (a seeded
random subset when there are more), as one HDF5 split in the train format. So the fine-tune
runs the very ``fit()`` of the train stage on an ordinary split, and the labelled data keep
anchoring what a leak is. A pseudo-labelled recording is stored as LEAK, or as its most
probable non-leak class (``data_label``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.adapt.field import FieldScores, FieldSet
from leakpipe.adapt.pseudo import LEAK, Pseudo, pack_rows
from leakpipe.data.reader import open_split
from leakpipe.data.schema import leak_index
from leakpipe.data.writer import SplitWriter
from leakpipe.detector import Network
from leakpipe.errors import DataError

PSEUDO_GROUP = "field"         # group of every pseudo-labelled row
PSEUDO_PREFIX = "field/"       # recording id of a pseudo-labelled row: this + the pool key


@dataclass(frozen=True)
class RoundSplit:
    labelled_rows: int
    pseudo_rows: int           # written (after the cap)
    pseudo_rows_available: int


def data_label(pseudo_label: int, class_probs: np.ndarray, network: Network) -> int:
    """The data class a pseudo-labelled recording is stored as: LEAK, else its most probable
    non-leak class (every non-leak class counts as not LEAK in a binary task)."""
    names = network.data_class_names
    leak = leak_index(names)
    if pseudo_label == LEAK:
        return leak
    if network.binary:
        return next(i for i in range(len(names)) if i != leak)
    probs = np.array(class_probs, dtype=np.float64)                  # task = data classes
    probs[leak] = -np.inf
    return int(np.argmax(probs))


def write_round_split(path: Path, train_path: Path, pool: FieldSet, scores: FieldScores,
                      pseudo: Sequence[Pseudo], network: Network, *, ratio: float,
                      seed: int) -> RoundSplit:
    """Labelled train rows + pseudo-labelled rows -> ``path`` (written atomically)."""
    n_long = network.features.n_long
    rows: list[tuple[int, np.ndarray]] = []           # (recording, packed rows) per recording
    for i, p in enumerate(pseudo):
        if p.label is not None and len(p.kept):
            segments = pool.mel[i].reshape(-1, *pool.mel[i].shape[2:])[p.kept]   # (k, S, M, T)
            rows.append((i, pack_rows(segments, n_long)))
    with open_split(train_path) as train:
        if train.features != network.features:
            raise DataError(f"{train_path}: feature config differs from the detector's")
        labelled = train.n_files
        cap = int(np.floor(ratio * labelled))
        keep = _row_subset([len(r) for _, r in rows], cap, seed)
        with SplitWriter(path, "train", train.features, train.class_names,
                         dtype=str(train.mel.dtype)) as writer:
            _copy_rows(train, writer)
            written = 0
            for (i, packed), chosen in zip(rows, keep, strict=True):
                if len(chosen):
                    label = data_label(pseudo[i].label or 0, scores.class_probs[i], network)
                    writer.append(packed[chosen], label, PSEUDO_PREFIX + pool.keys[i],
                                  PSEUDO_GROUP)
                    written += len(chosen)
    return RoundSplit(labelled, written, sum(len(r) for _, r in rows))


def _row_subset(counts: list[int], cap: int, seed: int) -> list[np.ndarray]:
    """Per recording, the indices of its rows kept: all when the total is within ``cap``, else
    a seeded uniform subset of ``cap`` rows over all recordings."""
    total = sum(counts)
    if total <= cap:
        return [np.arange(c) for c in counts]
    chosen = np.sort(np.random.default_rng(seed).choice(total, size=cap, replace=False))
    bounds = np.cumsum([0, *counts])
    return [chosen[(chosen >= a) & (chosen < b)] - a for a, b in zip(bounds[:-1], bounds[1:],
                                                                      strict=True)]


def _copy_rows(train: Any, writer: SplitWriter) -> None:
    """Every row of ``train``, recording by recording (rows of a recording are consecutive)."""
    ids, labels, groups = train.recording_ids, train.labels, train.groups
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], len(ids)]
    for a, b in zip(starts, ends, strict=True):
        writer.append(train.mel[a:b], int(labels[a]), str(ids[a]), str(groups[a]))
