"""Per-file summary of a split, streamed chunk by chunk: one pandas row per file.

great-expectations has no HDF5 source, so `validate` summarises each file (a row of ``mel``)
into a few numbers and validates the resulting DataFrame. Memory stays bounded whatever the
split size: ``mel`` is taken in blocks of about ``read_mb`` MiB aligned to whole HDF5 chunks, and
each block is reduced at once to per-row statistics. Large splits are shared out over the run's
worker processes (``SummaryPool``: each task streams its own row ranges); small ones are
summarised in-process.

Speed matters (the target is >= 0.6x a plain sequential h5py read). Unfiltered data is reduced
in place from the memory-mapped file (``MappedRows``); anything else is read into one reused
buffer. Float16 blocks are reduced by one fused compiled pass per file
(``leakpipe.validate.kernels``); see ``leakpipe.validate.stats`` for what is exact.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
from tqdm import tqdm

from leakpipe.constants import H5_GROUP, H5_LABELS, H5_MEL, H5_RECORDING_ID
from leakpipe.validate.kernels import warm_up
from leakpipe.validate.mapped import Layout, MappedRows, find_layout
from leakpipe.validate.pool import SummaryPool
from leakpipe.validate.stats import RowStats, block_stats
from leakpipe.validate.structure import SplitMeta, read_columns

log = logging.getLogger(__name__)

MIB = 2**20
TASK_BYTES = 64 * MIB          # rows handed to a worker at a time (progress granularity)
POOL_MIN_BYTES = 32 * MIB      # below this a split is summarised in-process (no pool start-up)
UNKNOWN_CLASS = "?"

SUMMARY_COLUMNS = ("split", "row", "label", "class_name", "recording_id", "group", "shape",
                   "finite_fraction", "min", "max", "mean", "std", "constant", "all_zero")


@dataclass(frozen=True)
class SplitSummary:
    """The per-file DataFrame of one split plus what the cross-split checks need."""

    split: str
    frame: pd.DataFrame
    fingerprints: np.ndarray
    checksum: str
    bytes_read: int
    seconds: float


# -- streaming ------------------------------------------------------------------------------


def read_rows(mel: h5py.Dataset, read_mb: float) -> int:
    """Rows per read: about ``read_mb`` MiB, a whole number of HDF5 chunks."""
    row_bytes = max(1, int(np.prod(mel.shape[1:])) * mel.dtype.itemsize)
    chunk = int(mel.chunks[0]) if mel.chunks else 1
    wanted = max(1, int(read_mb * MIB) // row_bytes)
    return max(chunk, wanted // chunk * chunk)


def stream_rows(mel: h5py.Dataset, start: int, stop: int, step: int,
                path: Path | None = None, layout: Layout | None = None) -> RowStats:
    """Statistics of rows ``start:stop``, ``step`` rows at a time.

    With the ``layout`` of unfiltered data (``find_layout(path, mel)`` when only ``path`` is
    given) the blocks are views of the memory-mapped file (``MappedRows``: no copy at all);
    otherwise each block is read with h5py into the same preallocated buffer.
    """
    if layout is None and path is not None:
        layout = find_layout(path, mel)
    if layout is None:
        return _read_and_reduce(mel, start, stop, step)
    return mapped_stats(path, layout, start, stop, step)


def mapped_stats(path: Path, layout: Layout, start: int, stop: int, step: int) -> RowStats:
    """Statistics of rows ``start:stop`` of a mapped file (no h5py needed)."""
    with MappedRows(path, layout) as mapped:
        parts = [block_stats(view) for _, view in mapped.blocks(start, stop, step)]
    return RowStats.concat(parts) if parts else RowStats.empty()


def _read_and_reduce(mel: h5py.Dataset, start: int, stop: int, step: int) -> RowStats:
    """The h5py path: each block read into one reused buffer (h5py's low-level read: no new
    allocation, no page faults, and the buffer stays in cache for the passes that follow)."""
    parts: list[RowStats] = []
    row_shape = tuple(mel.shape[1:])
    buffer = None
    file_space = mel.id.get_space()
    for first in range(start, stop, step):
        rows = min(stop, first + step) - first
        if buffer is None or buffer.shape[0] != rows:
            buffer = np.empty((rows, *row_shape), dtype=mel.dtype)
            memory_space = h5py.h5s.create_simple(buffer.shape)
        file_space.select_hyperslab((first,) + (0,) * len(row_shape), buffer.shape)
        mel.id.read(memory_space, file_space, buffer)
        parts.append(block_stats(buffer))
    return RowStats.concat(parts) if parts else RowStats.empty()


@dataclass(frozen=True)
class _Plan:
    step: int                      # rows per read
    ranges: list[tuple[int, int]]  # row ranges, one per task
    row_bytes: int
    layout: Layout | None          # where the rows lie in the file (None: read with h5py)


def _plan(meta: SplitMeta, read_mb: float) -> _Plan:
    with h5py.File(meta.path, "r") as h5:
        step = read_rows(h5[H5_MEL], read_mb)
        layout = find_layout(meta.path, h5[H5_MEL])
    row_bytes = meta.nbytes // max(1, meta.n_files)
    task_rows = max(step, TASK_BYTES // max(1, row_bytes) // step * step)
    ranges = [(a, min(meta.n_files, a + task_rows)) for a in range(0, meta.n_files, task_rows)]
    return _Plan(step, ranges, row_bytes, layout)


def _task(path: str, start: int, stop: int, step: int, layout: Layout | None) -> RowStats:
    if layout is not None:
        return mapped_stats(Path(path), layout, start, stop, step)
    with h5py.File(path, "r") as h5:
        return stream_rows(h5[H5_MEL], start, stop, step)


def start_split(meta: SplitMeta, read_mb: float, pool: SummaryPool | None = None) -> PendingSplit:
    """Hand a split's row ranges to ``pool``'s workers now (large splits), or later in-process.

    The caller can do other work (read the id columns) while the workers stream.
    """
    plan = _plan(meta, read_mb)
    if pool is None or pool.size == 1 or len(plan.ranges) == 1 or meta.nbytes < POOL_MIN_BYTES:
        return PendingSplit(meta, plan, None)
    log.info("validate %s: %d MiB over %d worker processes", meta.split, meta.nbytes // MIB,
             pool.size)
    warm_up()                              # compiled once here; forked workers inherit it
    executor = pool.executor()
    return PendingSplit(meta, plan, [executor.submit(_task, str(meta.path), a, b, plan.step,
                                                     plan.layout) for a, b in plan.ranges])


class PendingSplit:
    """The row statistics of one split: computing in worker processes, or to compute inline."""

    def __init__(self, meta: SplitMeta, plan: _Plan, futures: list[Future] | None) -> None:
        self.meta, self.plan, self.futures = meta, plan, futures

    def result(self, progress: bool = True) -> RowStats:
        bar = tqdm(total=self.meta.nbytes, unit="B", unit_scale=True, unit_divisor=1024,
                   desc=f"validate {self.meta.split}", disable=not progress, leave=False)
        with bar:
            return self._inline(bar) if self.futures is None else self._collect(bar)

    def _inline(self, bar: tqdm) -> RowStats:
        parts = []
        for a, b in self.plan.ranges:
            parts.append(_task(str(self.meta.path), a, b, self.plan.step, self.plan.layout))
            bar.update((b - a) * self.plan.row_bytes)
        return RowStats.concat(parts) if parts else RowStats.empty()

    def _collect(self, bar: tqdm) -> RowStats:
        parts = []
        try:
            for future, (a, b) in zip(self.futures, self.plan.ranges, strict=True):
                parts.append(future.result())  # in row order: concatenated as they come
                bar.update((b - a) * self.plan.row_bytes)
        finally:
            for future in self.futures:        # a failed task: drop the rest of this split
                future.cancel()
        return RowStats.concat(parts)


# -- the per-file DataFrame -----------------------------------------------------------------


def summary_frame(meta: SplitMeta, stats: RowStats, columns: dict[str, np.ndarray],
                  constant_tol: float) -> pd.DataFrame:
    """One row per file with the columns in ``SUMMARY_COLUMNS`` (index = row in the split)."""
    n_values = int(np.prod(meta.row_shape)) or 1
    labels = columns[H5_LABELS]
    names = np.array([*(meta.class_names or ()), UNKNOWN_CLASS], dtype=object)
    known = (labels >= 0) & (labels < len(names) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = stats.total / stats.finite
        var = np.maximum(stats.sumsq / stats.finite - mean**2, 0.0)
    spread = stats.maximum - stats.minimum
    constant = spread <= constant_tol
    std = np.where(spread == 0, 0.0, np.sqrt(var))
    return pd.DataFrame({
        "split": meta.split,
        "row": np.arange(meta.n_files),
        "label": labels,
        "class_name": names[np.where(known, labels, len(names) - 1)],
        "recording_id": columns[H5_RECORDING_ID],
        "group": columns[H5_GROUP],
        "shape": "x".join(str(n) for n in meta.row_shape),
        "finite_fraction": stats.finite / n_values,
        "min": stats.minimum,
        "max": stats.maximum,
        "mean": mean,
        "std": std,
        "constant": constant,
        "all_zero": (stats.minimum == 0) & (stats.maximum == 0),
    }, columns=list(SUMMARY_COLUMNS))


def split_checksum(meta: SplitMeta, columns: dict[str, np.ndarray],
                   fingerprints_: np.ndarray) -> str:
    """A digest of a split's contract attributes, columns and row fingerprints."""
    digest = hashlib.sha256()
    header = {"class_names": meta.class_names, "features": meta.feature_dict,
              "dtype": meta.mel_dtype, "shape": meta.mel_shape}
    digest.update(json.dumps(header, sort_keys=True, default=str).encode())
    digest.update(np.ascontiguousarray(columns[H5_LABELS], dtype=np.int64).tobytes())
    for key in (H5_RECORDING_ID, H5_GROUP):
        digest.update("\n".join(columns[key]).encode())
    digest.update(np.ascontiguousarray(fingerprints_).tobytes())
    return digest.hexdigest()


def summarise_split(meta: SplitMeta, *, read_mb: float, constant_tol: float,
                    pool: SummaryPool | None = None, progress: bool = True) -> SplitSummary:
    """Stream ``meta``'s split into its per-file summary (``meta`` must be summarisable)."""
    return finish_split(start_split(meta, read_mb, pool), constant_tol, progress)


def finish_split(pending: PendingSplit, constant_tol: float,
                 progress: bool = True) -> SplitSummary:
    """The per-file summary of a started split: its id columns are read while workers stream.

    Start every split before finishing the first, and the workers never wait between splits.
    """
    meta, start = pending.meta, time.perf_counter()
    columns = read_columns(meta.path)
    stats = pending.result(progress)
    frame = summary_frame(meta, stats, columns, constant_tol)
    seconds = time.perf_counter() - start
    log.debug("validate %s: %d files, %.1f MiB in %.2f s", meta.split, meta.n_files,
              meta.nbytes / MIB, seconds)
    return SplitSummary(meta.split, frame, stats.fingerprint,
                        split_checksum(meta, columns, stats.fingerprint), meta.nbytes, seconds)
