"""Reader API of one split file: metadata, label mapping, file and segment views.

Every later stage opens splits through ``open_split``; it checks the contract (schema version,
required datasets, consistent lengths and shapes) and raises ``DataFormatError`` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from types import TracebackType

import h5py
import numpy as np

from leakpipe.config import ConfigError, FeatureConfig, stored_features
from leakpipe.constants import (
    ATTR_CHUNK_ROWS,
    ATTR_CLASS_NAMES,
    ATTR_FEATURES,
    ATTR_LEAK_CLASS,
    ATTR_SCHEMA_VERSION,
    ATTR_STATS_CONFIG,
    ATTR_STATS_NAMES,
    H5_GROUP,
    H5_LABELS,
    H5_MEL,
    H5_RECORDING_ID,
    H5_RECORDING_RATE,
    H5_RECORDING_STATS,
    LEAK_CLASS,
    SCHEMA_VERSION,
)
from leakpipe.data.schema import DataFormatError, binary_labels, decode_json, leak_index

REQUIRED_DATASETS = (H5_MEL, H5_LABELS, H5_RECORDING_ID, H5_GROUP)
REQUIRED_ATTRS = (ATTR_SCHEMA_VERSION, ATTR_CLASS_NAMES, ATTR_FEATURES)


def open_split(path: Path | str) -> SplitReader:
    """Open and check a split file (use as a context manager, or call ``close()``)."""
    return SplitReader(Path(path))


class SplitReader:
    """Read-only view of one split: rows are clips ("files" in the paper's wording)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_file():
            raise DataFormatError(f"{path}: no such file")
        try:
            self.h5 = h5py.File(path, "r")
        except OSError as exc:
            raise DataFormatError(f"{path}: not a readable HDF5 file ({exc.__class__.__name__})") \
                from None
        try:
            self._check()
        except DataFormatError:
            self.h5.close()
            raise

    def _fail(self, problem: str) -> DataFormatError:
        return DataFormatError(f"{self.path}: {problem}")

    def _check(self) -> None:
        for key in REQUIRED_ATTRS:
            if key not in self.h5.attrs:
                raise self._fail(f"attribute {key!r} missing")
        version = self.h5.attrs[ATTR_SCHEMA_VERSION]
        if int(version) != SCHEMA_VERSION:
            raise self._fail(f"unknown schema_version {version} (this leakpipe reads "
                             f"{SCHEMA_VERSION})")
        for key in REQUIRED_DATASETS:
            if key not in self.h5:
                raise self._fail(f"dataset {key!r} missing")
        mel = self.h5[H5_MEL]
        if mel.ndim != 5:
            raise self._fail(f"dataset 'mel' has rank {mel.ndim}, expected 5 "
                             "(files, n_long, n_short, n_mels, n_frames)")
        for key in REQUIRED_DATASETS[1:]:
            if self.h5[key].shape != (mel.shape[0],):
                raise self._fail(f"dataset {key!r} has shape {self.h5[key].shape}, expected "
                                 f"({mel.shape[0]},) like 'mel'")
        if tuple(mel.shape[1:]) != self.features.segment_shape:
            raise self._fail(f"dataset 'mel' rows have shape {tuple(mel.shape[1:])}, the "
                             f"feature config says {self.features.segment_shape}")
        names = self.class_names
        if not names or len(set(names)) != len(names):
            raise self._fail(f"class_names {names} must be a non-empty list of distinct names")
        try:
            leak_index(names, self.leak_class)
        except DataFormatError as exc:
            raise self._fail(str(exc)) from None

    # -- metadata --------------------------------------------------------------------------

    @cached_property
    def class_names(self) -> tuple[str, ...]:
        value = self._json_attr(ATTR_CLASS_NAMES)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail("attribute 'class_names' must be a JSON list of strings")
        return tuple(value)

    def _json_attr(self, key: str) -> object:
        try:
            return decode_json(self.h5.attrs[key], key)
        except DataFormatError as exc:
            raise self._fail(str(exc)) from None

    @cached_property
    def leak_class(self) -> str:
        value = self.h5.attrs.get(ATTR_LEAK_CLASS, LEAK_CLASS)
        return value.decode() if isinstance(value, bytes) else str(value)

    @cached_property
    def leak_index(self) -> int:
        return leak_index(self.class_names, self.leak_class)

    @cached_property
    def features(self) -> FeatureConfig:
        raw = self._json_attr(ATTR_FEATURES)
        try:
            return stored_features(raw, ATTR_FEATURES, str(self.path))
        except ConfigError as exc:
            raise DataFormatError(str(exc)) from None

    @property
    def n_files(self) -> int:
        return int(self.h5[H5_MEL].shape[0])

    @property
    def mel(self) -> h5py.Dataset:
        """(files, n_long, n_short, n_mels, n_frames), lazily read."""
        return self.h5[H5_MEL]

    @property
    def chunk_rows(self) -> int:
        chunks = self.mel.chunks
        return int(chunks[0]) if chunks else int(self.h5.attrs.get(ATTR_CHUNK_ROWS, 1))

    @cached_property
    def labels(self) -> np.ndarray:
        """Class indices into ``class_names``, one per file."""
        labels = self.h5[H5_LABELS][:].astype(np.int64)
        bad = np.flatnonzero((labels < 0) | (labels >= len(self.class_names)))
        if bad.size:
            raise self._fail(f"labels[{bad[0]}] = {labels[bad[0]]} is outside class_names "
                             f"(0..{len(self.class_names) - 1})")
        return labels

    @cached_property
    def binary_labels(self) -> np.ndarray:
        """NOLEAK = 0 / LEAK = 1 per file, derived from ``class_names``."""
        return binary_labels(self.labels, self.class_names, self.leak_class)

    @cached_property
    def recording_ids(self) -> np.ndarray:
        return self.h5[H5_RECORDING_ID].asstr()[:]

    @cached_property
    def groups(self) -> np.ndarray:
        return self.h5[H5_GROUP].asstr()[:]

    @property
    def has_stats(self) -> bool:
        return H5_RECORDING_STATS in self.h5

    @cached_property
    def stats_names(self) -> tuple[str, ...]:
        """The columns of ``recording_stats`` (a split built before them: refused)."""
        self._need_stats()
        value = self._json_attr(ATTR_STATS_NAMES)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(f"attribute {ATTR_STATS_NAMES!r} must be a JSON list of strings")
        return tuple(value)

    @cached_property
    def stats_config(self) -> dict[str, object]:
        self._need_stats()
        value = self._json_attr(ATTR_STATS_CONFIG)
        if not isinstance(value, dict):
            raise self._fail(f"attribute {ATTR_STATS_CONFIG!r} must be a JSON object")
        return value

    @cached_property
    def recording_stats(self) -> np.ndarray:
        """(files, S) float32: each clip's recording's statistics (NaN: band above Nyquist)."""
        self._need_stats()
        stats = self.h5[H5_RECORDING_STATS]
        if stats.shape != (self.n_files, len(self.stats_names)):
            raise self._fail(f"dataset {H5_RECORDING_STATS!r} has shape {stats.shape}, "
                             f"expected ({self.n_files}, {len(self.stats_names)})")
        return stats[:].astype(np.float32)

    @cached_property
    def recording_rates(self) -> np.ndarray:
        """(files,) int: each clip's recording's own sample rate."""
        self._need_stats()
        return self.h5[H5_RECORDING_RATE][:].astype(np.int64)

    def _need_stats(self) -> None:
        if not self.has_stats:
            raise self._fail(f"dataset {H5_RECORDING_STATS!r} missing (the split was built "
                             "before recording statistics; rebuild it with `leakpipe build`)")

    # -- data views ------------------------------------------------------------------------

    def read_files(self, rows: np.ndarray | slice) -> np.ndarray:
        """Mel of the given files, (k, n_long, n_short, n_mels, n_frames)."""
        if isinstance(rows, slice):
            return self.mel[rows]
        rows = np.asarray(rows)
        order = np.argsort(rows)
        out = np.empty((len(rows), *self.mel.shape[1:]), dtype=self.mel.dtype)
        out[order] = self.mel[rows[order]]  # h5py needs increasing indices
        return out

    def iter_chunks(self, rows_per_read: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield (first row, block) in file order, block-aligned with the HDF5 chunks."""
        step = rows_per_read or self.chunk_rows
        for start in range(0, self.n_files, step):
            yield start, self.mel[start:start + step]

    @staticmethod
    def as_segments(block: np.ndarray) -> np.ndarray:
        """(files, n_long, n_short, M, T) -> (files * n_long * n_short, M, T), no copy."""
        return block.reshape(-1, *block.shape[-2:])

    def close(self) -> None:
        if self.h5.id.valid:
            self.h5.close()

    def __enter__(self) -> SplitReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
