"""Read a split's baseline features: MFCC summaries and clip level per clip, with its labels.

The stored log-mel is read in blocks of whole clips, so memory stays bounded whatever the split
size; the features themselves come from the pure functions of ``features``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leakpipe.baselines.features import Summary, clip_level, mfcc_summary
from leakpipe.config import FeatureConfig
from leakpipe.data.reader import open_split
from leakpipe.errors import ConfigError, DataError

READ_ROWS = 256   # clips per read: ~20 MiB of float64 MFCC work at the default (23, 7, 64, 1)


@dataclass(frozen=True)
class ClipFeatures:
    """One split as a feature table, in file order."""

    path: Path
    mfcc: np.ndarray            # (F, n_mfcc) or (F, 2 n_mfcc)
    level: np.ndarray           # (F, 1) mean log-mel in dB
    truth: np.ndarray           # (F,) bool: the clip is LEAK
    recording_id: np.ndarray    # (F,) str: the unit the bootstrap resamples
    class_names: tuple[str, ...]
    features: FeatureConfig

    @property
    def n_files(self) -> int:
        return int(self.truth.shape[0])


def read_features(path: Path, n_mfcc: int, summary: Summary) -> ClipFeatures:
    """Every clip of the split at ``path`` -> MFCC summary, level, LEAK truth, recording id."""
    with open_split(path) as split:
        if split.n_files == 0:
            raise DataError(f"{path}: the split holds no files")
        n_mels = split.features.n_mels
        if n_mfcc > n_mels:
            raise ConfigError(f"baselines.n_mfcc: {n_mfcc} exceeds the {n_mels} mel bands of "
                              f"{path}")
        mfcc, level = [], []
        for _, block in split.iter_chunks(READ_ROWS):                  # (k, L, S, M, T)
            mfcc.append(mfcc_summary(block, n_mfcc, summary))
            level.append(clip_level(block))
        table = ClipFeatures(path=path, mfcc=np.concatenate(mfcc), level=np.concatenate(level),
                             truth=split.binary_labels.astype(bool),
                             recording_id=split.recording_ids, class_names=split.class_names,
                             features=split.features)
    _check_finite(table)
    return table


def _check_finite(table: ClipFeatures) -> None:
    bad = np.flatnonzero(~np.isfinite(table.mfcc).all(axis=1) | ~np.isfinite(table.level[:, 0]))
    if bad.size:
        raise DataError(f"{table.path}: clip {bad[0]} ({table.recording_id[bad[0]]}) holds "
                        "non-finite log-mel values; run `leakpipe validate`")


def check_compatible(splits: dict[str, ClipFeatures]) -> None:
    """Every split must share the first split's classes and feature config."""
    first, *others = splits.values()
    for other in others:
        if other.class_names != first.class_names:
            raise DataError(f"{other.path}: classes {list(other.class_names)} differ from "
                            f"{list(first.class_names)} in {first.path}")
        if other.features != first.features:
            raise DataError(f"{other.path}: feature config differs from {first.path}; "
                            "rebuild the splits")
