"""Per-file summary of a split, streamed chunk by chunk: one pandas row per file.

great-expectations has no HDF5 source, so `validate` summarises each file (a row of ``mel``)
into a few numbers and validates the resulting DataFrame. Memory stays bounded whatever the
split size: ``mel`` is taken in blocks of about ``read_mb`` MiB aligned to whole HDF5 chunks, and
each block is reduced at once to per-row statistics. Large splits are shared out over the run's
worker processes (``SummaryPool``: each task streams its own row ranges); small ones are
summarised in-process.

Speed matters (the target is >= 0.6x a plain sequential h5py read). Unfiltered data is reduced
in place from the memory-mapped file (``MappedRows``); anything else is read into one reused
buffer. Each block is converted to float32 once (torch's vectorised half -> float copy; numpy's
is several times slower) for the sums, reduced with numpy SIMD passes (not BLAS, whose threads
stall on blocks this small); float16 min / max / finiteness come exactly from integer passes
over the bit patterns. Only rows holding NaN / inf take the slow, masked path. Mean and std come
from single-pass float32 sums (relative error ~1e-5), plenty for a report; constant rows get
std 0.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from leakpipe.constants import H5_GROUP, H5_LABELS, H5_MEL, H5_RECORDING_ID
from leakpipe.validate.mapped import MappedRows
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
                path: Path | None = None) -> RowStats:
    """Statistics of rows ``start:stop``, ``step`` rows at a time.

    When ``path`` (the file of ``mel``) is given and ``mel`` is stored unfiltered, the blocks are
    views of the memory-mapped file (``MappedRows``: no copy at all); otherwise each block is
    read with h5py into the same preallocated buffer.
    """
    mapped = MappedRows.open(path, mel) if path is not None else None
    if mapped is None:
        return _read_and_reduce(mel, start, stop, step)
    with mapped:
        scratch = np.empty((step, math.prod(mapped.row_shape)), dtype=np.float32)
        parts = [block_stats(view, scratch) for _, view in mapped.blocks(start, stop, step)]
    return RowStats.concat(parts) if parts else RowStats.empty()


def _read_and_reduce(mel: h5py.Dataset, start: int, stop: int, step: int) -> RowStats:
    """The h5py path: each block read into one reused buffer (h5py's low-level read: no new
    allocation, no page faults, and the buffer stays in cache for the passes that follow)."""
    parts: list[RowStats] = []
    row_shape = tuple(mel.shape[1:])
    buffer = scratch = None
    file_space = mel.id.get_space()
    for first in range(start, stop, step):
        rows = min(stop, first + step) - first
        if buffer is None or buffer.shape[0] != rows:
            buffer = np.empty((rows, *row_shape), dtype=mel.dtype)
            scratch = None if mel.dtype == np.float32 else np.empty(
                (rows, math.prod(row_shape)), dtype=np.float32)
            memory_space = h5py.h5s.create_simple(buffer.shape)
        file_space.select_hyperslab((first,) + (0,) * len(row_shape), buffer.shape)
        mel.id.read(memory_space, file_space, buffer)
        parts.append(block_stats(buffer, scratch))
    return RowStats.concat(parts) if parts else RowStats.empty()


@dataclass(frozen=True)
class _Plan:
    step: int                      # rows per read
    ranges: list[tuple[int, int]]  # row ranges, one per task
    row_bytes: int


def _plan(meta: SplitMeta, read_mb: float) -> _Plan:
    with h5py.File(meta.path, "r") as h5:
        step = read_rows(h5[H5_MEL], read_mb)
    row_bytes = meta.nbytes // max(1, meta.n_files)
    task_rows = max(step, TASK_BYTES // max(1, row_bytes) // step * step)
    ranges = [(a, min(meta.n_files, a + task_rows)) for a in range(0, meta.n_files, task_rows)]
    return _Plan(step, ranges, row_bytes)


@contextlib.contextmanager
def single_threaded_torch() -> Iterator[None]:
    """torch on one thread while converting cache-sized blocks, restored afterwards.

    torch's intra-op threads fight numpy / OpenBLAS for the same cores on blocks this small
    (measured: 0.6 GB/s with two threads, 8 GB/s with one).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _task(path: str, start: int, stop: int, step: int) -> RowStats:
    with h5py.File(path, "r") as h5:
        return stream_rows(h5[H5_MEL], start, stop, step, Path(path))


def stream_split(meta: SplitMeta, read_mb: float, pool: SummaryPool | None = None,
                 progress: bool = True) -> RowStats:
    """Row statistics of a summarisable split, in-process or over ``pool``'s workers."""
    plan = _plan(meta, read_mb)
    bar = tqdm(total=meta.nbytes, unit="B", unit_scale=True, unit_divisor=1024,
               desc=f"validate {meta.split}", disable=not progress, leave=False)
    with bar, single_threaded_torch():
        if pool is None or pool.size == 1 or len(plan.ranges) == 1 or \
                meta.nbytes < POOL_MIN_BYTES:
            return _stream_inline(meta, plan, bar)
        return _stream_pool(meta, plan, pool, bar)


def _stream_inline(meta: SplitMeta, plan: _Plan, bar: tqdm) -> RowStats:
    parts = []
    with h5py.File(meta.path, "r") as h5:
        for a, b in plan.ranges:
            parts.append(stream_rows(h5[H5_MEL], a, b, plan.step, meta.path))
            bar.update((b - a) * plan.row_bytes)
    return RowStats.concat(parts) if parts else RowStats.empty()


def _stream_pool(meta: SplitMeta, plan: _Plan, pool: SummaryPool, bar: tqdm) -> RowStats:
    log.info("validate %s: %d MiB over %d worker processes", meta.split, meta.nbytes // MIB,
             pool.size)
    executor = pool.executor()
    futures = [executor.submit(_task, str(meta.path), a, b, plan.step) for a, b in plan.ranges]
    parts = []
    try:
        for future, (a, b) in zip(futures, plan.ranges, strict=True):
            parts.append(future.result())  # in row order: results are concatenated as they are
            bar.update((b - a) * plan.row_bytes)
    finally:
        for future in futures:             # a failed task: drop the rest of this split
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
    start = time.perf_counter()
    stats = stream_split(meta, read_mb, pool, progress)
    columns = read_columns(meta.path)
    frame = summary_frame(meta, stats, columns, constant_tol)
    seconds = time.perf_counter() - start
    log.debug("validate %s: %d files, %.1f MiB in %.2f s", meta.split, meta.n_files,
              meta.nbytes / MIB, seconds)
    return SplitSummary(meta.split, frame, stats.fingerprint,
                        split_checksum(meta, columns, stats.fingerprint), meta.nbytes, seconds)
