"""Worker processes that summarise splits: one pool per validation run, started on first use.

A pool per split paid its start-up and shut-down once per split (and left the cores idle while
the next one started); the run now starts one pool, lazily, when the first split large enough
to share out arrives, and every later split reuses its workers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from types import TracebackType


def cpu_count() -> int:
    """CPU cores this process may run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, cores or 1)


def _pool_context() -> mp.context.BaseContext:
    # fork starts a worker in milliseconds (spawn / forkserver re-import numpy, h5py, numba:
    # about a second each) and inherits the compiled kernel. Workers only open their own files
    # and run numpy / h5py / numba CPU code; spawn where fork does not exist.
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    return mp.get_context(method)


class SummaryPool:
    """``workers`` processes (0 = one per core) shared by the splits of one run."""

    def __init__(self, workers: int) -> None:
        self.size = max(1, workers or cpu_count())
        self._executor: ProcessPoolExecutor | None = None

    def executor(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(self.size, mp_context=_pool_context())
        return self._executor

    def __enter__(self) -> SummaryPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
