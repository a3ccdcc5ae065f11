"""One fused pass per file over float16 log-mel rows: the summary statistics, compiled by numba.

NumPy would take five passes over a float32 copy of each block (copy, sum, sum of squares, min,
max) plus one for the fingerprint; here each row is walked twice while it sits in the cache:

1. over the stored 16-bit patterns: the integer extremes (exact min / max / finiteness, see
   ``leakpipe.validate.stats.half_values``), the 64-bit fingerprint words, and each value's
   float32 bits (sign and magnitude shifted into place; the float then times 2**112 is the exact
   value for normal and subnormal halves alike);
2. over those float32 values: the sum and the sum of squares.

Both loops vectorise (AVX2 / AVX-512). inf / NaN give meaningless sums here, but their rows
are flagged by the integer pass and recomputed on the masked path. numba compiles on first use
(about a second, cached on disk afterwards); ``warm_up`` does it before worker processes fork.
"""

from __future__ import annotations

import numpy as np
from numba import njit

HALF_TO_FLOAT = np.float32(2.0**112)   # float32 bits of a half shifted by 13, times this
WORD_HALVES = 4                        # float16 values per 64-bit fingerprint word


@njit(cache=True, nogil=True, fastmath=True)
def _row(u16: np.ndarray, weights: np.ndarray, bits: np.ndarray) -> tuple:
    umax, umin = np.uint16(0), np.uint16(0xFFFF)
    imax, imin = np.int16(-0x8000), np.int16(0x7FFF)
    for j in range(u16.shape[0]):
        h = u16[j]
        g = np.int16(h)
        umax, umin = max(umax, h), min(umin, h)
        imax, imin = max(imax, g), min(imin, g)
        w = np.uint32(h)
        bits[j] = ((w & 0x8000) << 16) | ((w & 0x7FFF) << 13)
    acc = np.uint64(0)
    n_words = u16.shape[0] // WORD_HALVES
    for k in range(n_words):                                     # little-endian 64-bit words
        j = k * WORD_HALVES
        word = (np.uint64(u16[j]) | (np.uint64(u16[j + 1]) << np.uint64(16))
                | (np.uint64(u16[j + 2]) << np.uint64(32))
                | (np.uint64(u16[j + 3]) << np.uint64(48)))
        acc += word * weights[k]
    if u16.shape[0] % WORD_HALVES:                               # the zero-padded last word
        word = np.uint64(0)
        for j in range(n_words * WORD_HALVES, u16.shape[0]):
            word |= np.uint64(u16[j]) << np.uint64(16 * (j % WORD_HALVES))
        acc += word * weights[n_words]
    values = bits.view(np.float32)
    total, sumsq = np.float32(0.0), np.float32(0.0)
    for j in range(values.shape[0]):
        v = values[j] * HALF_TO_FLOAT
        total += v
        sumsq += v * v
    return umax, umin, imax, imin, acc, total, sumsq


@njit(cache=True, nogil=True)
def half_rows(u16: np.ndarray, weights: np.ndarray, ext: np.ndarray, fingerprint: np.ndarray,
              sums: np.ndarray) -> None:
    """Rows of float16 bit patterns (rows, n) -> ext (rows, 4) int32 [uint16 max, uint16 min,
    int16 max, int16 min], fingerprint (rows,) uint64, sums (rows, 2) float64 [sum, sum sq]."""
    bits = np.empty(u16.shape[1], dtype=np.uint32)
    for r in range(u16.shape[0]):
        umax, umin, imax, imin, acc, total, sumsq = _row(u16[r], weights, bits)
        ext[r, 0], ext[r, 1], ext[r, 2], ext[r, 3] = umax, umin, imax, imin
        fingerprint[r] = acc
        sums[r, 0], sums[r, 1] = total, sumsq


def warm_up() -> None:
    """Compile (or load from the disk cache) before worker processes fork."""
    u16 = np.zeros((1, WORD_HALVES + 1), dtype=np.uint16)
    half_rows(u16, np.ones(2, dtype=np.uint64), np.empty((1, 4), np.int32),
              np.empty(1, np.uint64), np.empty((1, 2), np.float64))
