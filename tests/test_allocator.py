"""Allocator controls: freed buffers are reused (no page faults again) once retained."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from leakpipe.allocator import libc

# Mallocs and frees a 64 MiB buffer several times with glibc itself, writing all of it each
# time, and reports the minor page faults of those rounds (after one warm-up round).
PROBE = """
import ctypes, json, resource, sys
from leakpipe.allocator import libc, retain_freed_memory
retained = retain_freed_memory() if sys.argv[1] == "retain" else False
lib = libc()
lib.malloc.restype = ctypes.c_void_p
lib.free.argtypes = [ctypes.c_void_p]
def rounds(n):
    for _ in range(n):
        buf = lib.malloc(64 * 2**20)
        ctypes.memset(buf, 1, 64 * 2**20)
        lib.free(buf)
rounds(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(5)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"retained": retained, "faults": faults}))
"""
PAGES_PER_ROUND = 64 * 2**20 // 4096


def _probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(libc() is None or not hasattr(libc(), "mallopt"),
                    reason="needs glibc's mallopt")
def test_retained_memory_is_reused_without_page_faults() -> None:
    default = _probe("default")
    retained = _probe("retain")
    assert retained["retained"] is True
    assert default["faults"] >= 4 * PAGES_PER_ROUND      # glibc unmaps and faults in again
    assert retained["faults"] < PAGES_PER_ROUND // 4     # the freed buffer is reused
