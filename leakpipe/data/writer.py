"""Streaming writer of one split file: rows are appended as recordings finish.

The file is written under a temporary name and renamed on ``commit()``, so a crash or an
error never leaves a half-written split that DVC could cache as valid.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from leakpipe import __version__
from leakpipe.config import FeatureConfig
from leakpipe.constants import (
    ATTR_CHUNK_ROWS,
    ATTR_CLASS_NAMES,
    ATTR_FEATURES,
    ATTR_LEAK_CLASS,
    ATTR_SCHEMA_VERSION,
    ATTR_SPLIT,
    ATTR_STATS_CONFIG,
    ATTR_STATS_NAMES,
    ATTR_VERSION,
    H5_CLIP_INDEX,
    H5_GROUP,
    H5_LABELS,
    H5_MEL,
    H5_RECORDING_ID,
    H5_RECORDING_RATE,
    H5_RECORDING_STATS,
    H5_WAVEFORM,
    LEAK_CLASS,
    SCHEMA_VERSION,
)
from leakpipe.data.schema import encode_json
from leakpipe.errors import DataError
from leakpipe.files import temporary_sibling

_STR = h5py.string_dtype("utf-8")
CLIP_INDEX_LIMIT = int(np.iinfo(np.int16).max) + 1  # clip_index runs 0 .. this - 1


def chunk_rows(row_bytes: int, chunk_mb: float) -> int:
    """Whole clips per chunk so that a chunk is about ``chunk_mb`` MiB (at least one clip)."""
    return max(1, int(chunk_mb * 2**20) // max(1, row_bytes))


@dataclass(frozen=True)
class StatsColumns:
    """What the split's ``recording_stats`` columns are and the settings that computed them."""

    names: tuple[str, ...]
    config: dict[str, Any]


class SplitWriter:
    """Append clips to ``path`` (a context manager; commit on clean exit, discard on error).

    With ``stats``, every clip row also carries its recording's whole-recording statistics and
    sample rate (the same values on each row of a recording: every reader selects clip rows,
    so a recording's statistics travel with whichever of its rows are read).
    """

    def __init__(self, path: Path, split: str, features: FeatureConfig,
                 class_names: tuple[str, ...], dtype: str = "float16",
                 chunk_mb: float = 1.0, store_waveform: bool = False,
                 stats: StatsColumns | None = None) -> None:
        self.path = Path(path)
        self.tmp_path = temporary_sibling(self.path)
        self.rows = 0
        self._capacity = 0
        shape = features.segment_shape
        self._mel_dtype = np.dtype(dtype)
        row_bytes = int(np.prod(shape)) * self._mel_dtype.itemsize
        self._chunk = chunk_rows(row_bytes, chunk_mb)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._h5 = h5py.File(self.tmp_path, "w")
        f = self._h5
        f.attrs[ATTR_SCHEMA_VERSION] = SCHEMA_VERSION
        f.attrs[ATTR_CLASS_NAMES] = encode_json(list(class_names))
        f.attrs[ATTR_LEAK_CLASS] = LEAK_CLASS
        f.attrs[ATTR_FEATURES] = encode_json(features.to_dict())
        f.attrs[ATTR_VERSION] = __version__
        f.attrs[ATTR_SPLIT] = split
        f.attrs[ATTR_CHUNK_ROWS] = self._chunk
        self._datasets = {
            H5_MEL: f.create_dataset(H5_MEL, shape=(0, *shape), maxshape=(None, *shape),
                                     dtype=dtype, chunks=(self._chunk, *shape),
                                     track_times=False),
            H5_LABELS: self._column(H5_LABELS, np.int16),
            H5_RECORDING_ID: self._column(H5_RECORDING_ID, _STR),
            H5_GROUP: self._column(H5_GROUP, _STR),
            H5_CLIP_INDEX: self._column(H5_CLIP_INDEX, np.int16),
        }
        if stats is not None:
            f.attrs[ATTR_STATS_NAMES] = encode_json(list(stats.names))
            f.attrs[ATTR_STATS_CONFIG] = encode_json(stats.config)
            k = len(stats.names)
            self._datasets[H5_RECORDING_STATS] = f.create_dataset(
                H5_RECORDING_STATS, shape=(0, k), maxshape=(None, k), dtype=np.float32,
                chunks=(max(self._chunk, 256), k), track_times=False)
            self._datasets[H5_RECORDING_RATE] = self._column(H5_RECORDING_RATE, np.int32)
        if store_waveform:
            n = features.clip_samples
            self._datasets[H5_WAVEFORM] = f.create_dataset(
                H5_WAVEFORM, shape=(0, n), maxshape=(None, n), dtype=np.float32,
                chunks=(self._chunk, n), track_times=False)

    def _column(self, name: str, dtype: object) -> h5py.Dataset:
        return self._h5.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype,
                                       chunks=(max(self._chunk, 256),), track_times=False)

    def append(self, mel: np.ndarray, label: int, recording_id: str, group: str,
               waveform: np.ndarray | None = None, stats: np.ndarray | None = None,
               rate: int = 0) -> None:
        """Append all clips of one recording: ``mel`` is (clips, n_long, n_short, n_mels, T);
        ``stats`` (S,) its statistics and ``rate`` its own sample rate (files with stats)."""
        if (H5_RECORDING_STATS in self._datasets) != (stats is not None):
            raise DataError(f"{recording_id}: recording statistics given to a split "
                            f"{'without' if stats is not None else 'with'} a stats column")
        n = mel.shape[0]
        if n > CLIP_INDEX_LIMIT:
            raise DataError(f"{recording_id}: {n} clips; clip_index (int16) holds at most "
                            f"{CLIP_INDEX_LIMIT} per recording (set build.clips_per_recording "
                            "to a number)")
        start = self.rows
        self._grow(start + n)
        # numpy casts as HDF5 would (float32 -> float16: round to nearest even, the same bytes)
        # at about half the cost, and a mel already in the storage type (build's workers cast
        # it: half the bytes to send) is not copied; whole columns in the stored integer type
        # skip h5py's broadcast and conversion. The writes themselves stay as they were: their
        # order decides where HDF5 places chunks and strings, i.e. the file's bytes.
        self._datasets[H5_MEL][start:start + n] = np.asarray(mel, self._mel_dtype)
        self._datasets[H5_LABELS][start:start + n] = np.full(n, label, np.int16)
        self._datasets[H5_RECORDING_ID][start:start + n] = [recording_id] * n
        self._datasets[H5_GROUP][start:start + n] = [group] * n
        self._datasets[H5_CLIP_INDEX][start:start + n] = np.arange(n, dtype=np.int16)
        if stats is not None:
            self._datasets[H5_RECORDING_STATS][start:start + n] = np.broadcast_to(
                np.asarray(stats, np.float32), (n, len(stats)))
            self._datasets[H5_RECORDING_RATE][start:start + n] = np.full(n, rate, np.int32)
        if H5_WAVEFORM in self._datasets and waveform is not None:
            self._datasets[H5_WAVEFORM][start:start + n] = waveform
        self.rows += n

    def _grow(self, needed: int) -> None:
        if needed <= self._capacity:
            return
        self._capacity = max(needed, self._capacity * 2, self._chunk)
        for ds in self._datasets.values():
            ds.resize(self._capacity, axis=0)

    def commit(self) -> None:
        """Trim to the rows written, close and rename into place."""
        for ds in self._datasets.values():
            ds.resize(self.rows, axis=0)
        self._h5.close()
        os.replace(self.tmp_path, self.path)

    def discard(self) -> None:
        if self._h5.id.valid:
            self._h5.close()
        self.tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> SplitWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()
