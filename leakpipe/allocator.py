"""glibc malloc controls: keep freed buffers for CPU inference, or give them back to measure.

glibc's malloc serves large requests (above an adaptive threshold of at most 32 MiB) with fresh
``mmap`` pages and gives freed memory at the top of the heap back to the kernel. A CPU forward
pass allocates and frees the same large activation tensors every batch, so each pass page-faults
them in again: measured on a 2-core AVX-512 machine, LeakCNN inference on 16,384-segment batches
ran at 0.45x the speed it reaches once freed memory is kept (benchmarks/perf/bench_evaluate.py).
``retain_freed_memory`` (called by the evaluate and predict commands) raises both thresholds so
freed buffers stay in the process for reuse; resident memory then stays at its peak, which the
evaluation batch budget already bounds. ``trim_heap`` does the opposite once, so that memory
measurements are not hidden by reuse. Other C libraries are left as they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1           # mallopt parameter numbers from glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
RETAIN_BYTES = 1 << 30          # requests and free heap tops below 1 GiB stay in the process


@functools.cache
def libc() -> ctypes.CDLL | None:
    """The process's C library, or None where it cannot be loaded."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc), so RSS growth is not hidden by reuse."""
    lib = libc()
    if lib is not None and hasattr(lib, "malloc_trim"):
        lib.malloc_trim(0)


@functools.cache
def retain_freed_memory() -> bool:
    """Keep freed host memory for reuse (glibc only); True when the setting took effect."""
    lib = libc()
    if lib is None or not hasattr(lib, "mallopt"):
        log.debug("allocator: no mallopt in this C library; left as it is")
        return False
    done = bool(lib.mallopt(M_MMAP_THRESHOLD, RETAIN_BYTES)) and \
        bool(lib.mallopt(M_TRIM_THRESHOLD, RETAIN_BYTES))
    log.debug("allocator: freed memory below %d MiB is kept for reuse: %s", RETAIN_BYTES >> 20,
              done)
    return done
