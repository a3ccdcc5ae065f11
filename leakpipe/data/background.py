"""The background reader: one thread that reads whole files from a split's HDF5 ``mel``.

``BackgroundReader`` runs jobs (functions of the ``mel`` dataset) in one thread with its own
file handle and a bounded number of reads in flight; ``read_file_block`` is the usual job body:
row ranges of files -> a batch of segments in row order, in memory returned to the OS on free.
"""

from __future__ import annotations

import mmap
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import h5py
import numpy as np
import torch

from leakpipe.constants import H5_MEL
from leakpipe.data.feed import HostBatch
from leakpipe.data.split_info import SplitInfo

T = TypeVar("T")


def read_rows(mel: h5py.Dataset, start: int, stop: int, out: np.ndarray) -> None:
    """Read files ``start:stop`` of ``mel`` into ``out`` (one call per chunk-aligned block)."""
    mel.read_direct(out, np.s_[start:stop])


class BackgroundReader:
    """One thread with its own HDF5 handle and at most ``depth`` reads in flight (bounded).

    A job is a function of the ``mel`` dataset. ``map`` hands results over in submission order
    and re-raises a job's exception in the consumer; ``close`` cancels what has not started,
    closes the file in the thread that opened it and joins the thread. h5py holds the GIL
    while it reads, so jobs read one chunk-aligned block per call to let the consumer run.
    """

    def __init__(self, path: Path, name: str = "leakpipe-reader") -> None:
        self.path = path
        self._h5: h5py.File | None = None   # opened, used and closed by the reader thread only
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: deque[Future[Any]] = deque()
        self._closed = False

    def _run(self, job: Callable[[h5py.Dataset], T]) -> T:
        if self._h5 is None:
            self._h5 = h5py.File(self.path, "r")
        return job(self._h5[H5_MEL])

    def _close_file(self) -> None:
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None

    def map(self, jobs: Iterable[Callable[[h5py.Dataset], T]], depth: int) -> Iterator[T]:
        jobs = iter(jobs)
        for job in jobs:
            self._pending.append(self._pool.submit(self._run, job))
            if len(self._pending) >= depth:
                break
        while self._pending:
            result = self._pending.popleft().result()   # a reader error is raised here
            job = next(jobs, None)
            if job is not None:
                self._pending.append(self._pool.submit(self._run, job))
            yield result

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while self._pending:
            self._pending.popleft().cancel()
        self._pool.submit(self._close_file)
        self._pool.shutdown(wait=True)

    def __enter__(self) -> BackgroundReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _unmapped_on_free(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array in its own anonymous mapping, returned to the OS as soon as it is freed.

    Windows come and go every few hundred batches from a new reader thread each pass; from
    malloc, glibc's per-thread arenas and growing mmap threshold keep the freed windows
    resident (measured: RSS grew by about two windows per epoch).
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=dtype,
                         count=int(np.prod(shape))).reshape(shape)


def read_file_block(mel: h5py.Dataset, rows: list[tuple[int, int]], info: SplitInfo,
                    pin: bool = False) -> HostBatch:
    """Read row ranges of files -> x (n, 1, M, T) segments in row order, file_idx (n,)."""
    n_rows = sum(stop - start for start, stop in rows)
    block = _unmapped_on_free((n_rows, *info.segment_shape), mel.dtype)  # (k, L, S, M, T)
    offset = 0
    for start, stop in rows:
        read_rows(mel, start, stop, block[offset:offset + stop - start])
        offset += stop - start
    x = torch.from_numpy(block).view(n_rows * info.segments_per_file, 1, *info.mel_shape)
    files = torch.cat([torch.arange(start, stop) for start, stop in rows])
    files = files.repeat_interleave(info.segments_per_file)  # (n,)
    return (x.pin_memory(), files.pin_memory()) if pin else (x, files)
