"""Per-row statistics of a block of files (pure): what the validation summary is made of.

Each row of a block is one file's mel values. Float32 sums give mean and std; float16 min / max
and finiteness come exactly from the extremes of the stored bit patterns; a seeded linear hash
of the stored bytes fingerprints each file for the duplicate check. Float16 rows (the contract's
dtype) take one fused compiled pass (``leakpipe.validate.kernels``), float32 rows NumPy passes.
Rows holding NaN / inf take a slow, masked path so their statistics cover the finite values
only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from leakpipe.validate.kernels import half_rows

FINGERPRINT_SEED = 20250333    # fixed: the same bytes give the same fingerprint in every run
HALF_SIGN = 0x8000             # float16 sign bit
HALF_EXPONENT = 0x7C00         # float16 exponent bits: all set = inf or NaN


@dataclass(frozen=True)
class RowStats:
    """Statistics of consecutive rows (files); the sums are over finite values only."""

    finite: np.ndarray       # int64: finite values per row
    minimum: np.ndarray      # float64, NaN when a row has no finite value
    maximum: np.ndarray
    total: np.ndarray
    sumsq: np.ndarray
    fingerprint: np.ndarray  # uint64 content fingerprint of the stored bytes

    @staticmethod
    def empty() -> RowStats:
        floats = np.empty(0, np.float64)
        return RowStats(np.empty(0, np.int64), floats, floats, floats, floats,
                        np.empty(0, np.uint64))

    @staticmethod
    def concat(parts: list[RowStats]) -> RowStats:
        names = ("finite", "minimum", "maximum", "total", "sumsq", "fingerprint")
        return RowStats(**{n: np.concatenate([getattr(p, n) for p in parts]) for n in names})



@lru_cache(maxsize=8)
def fingerprint_weights(words: int) -> np.ndarray:
    """Odd 64-bit weights: the fingerprint is sum(word_i * w_i) mod 2**64 over a row's words."""
    rng = np.random.default_rng(FINGERPRINT_SEED)
    return rng.integers(0, 2**63, words, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def fingerprints(flat: np.ndarray) -> np.ndarray:
    """(rows, values) -> uint64 per row; equal bytes give equal fingerprints."""
    raw = np.ascontiguousarray(flat).view(np.uint8)
    pad = (-raw.shape[1]) % 8
    if pad:
        raw = np.concatenate([raw, np.zeros((raw.shape[0], pad), np.uint8)], axis=1)
    words = raw.view(np.uint64)
    return np.einsum("ij,j->i", words, fingerprint_weights(words.shape[1]))


def half_values(umax: np.ndarray, umin: np.ndarray, imax: np.ndarray,
                imin: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact per-row min, max (float64) and all-finite flag of float16 rows from the extremes
    of their bit patterns read as uint16 (``umax``, ``umin``) and as int16 (``imax``, ``imin``).

    As int16, non-negative halves order like their values and negative ones in reverse; as
    uint16, negative halves order by magnitude above every non-negative one. So a row's lowest
    value is its uint16 maximum when it holds a negative value (else its uint16 minimum), and
    its highest is its int16 maximum when it holds a non-negative value (else its int16
    minimum). inf and NaN have every exponent bit set: +inf / +NaN are int16 >= 0x7C00,
    -inf / -NaN uint16 >= 0xFC00 (rows holding them take the masked path for their stats).
    """
    finite = (imax < HALF_EXPONENT) & (umax < (HALF_SIGN | HALF_EXPONENT))
    low = np.where(umax >= HALF_SIGN, umax, umin).astype(np.uint16).view(np.float16)
    high = np.where(imax >= 0, imax, imin).astype(np.int16).view(np.float16)
    return low.astype(np.float64), high.astype(np.float64), finite


def block_stats(block: np.ndarray) -> RowStats:
    """Statistics of each row of ``block`` (rows, ...): float16 in one fused compiled pass."""
    flat = block.reshape(block.shape[0], -1)
    if flat.dtype == np.float16:
        return _half_stats(np.ascontiguousarray(flat))
    x = flat.astype(np.float32, copy=False)                       # (rows, values)
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.einsum("ij->i", x).astype(np.float64)  # not BLAS: its threads stall here
        sumsq = np.einsum("ij,ij->i", x, x).astype(np.float64)
        minimum = x.min(axis=1).astype(np.float64)
        maximum = x.max(axis=1).astype(np.float64)
    ok = np.isfinite(total) & np.isfinite(sumsq)
    return _finish(x, ok, minimum, maximum, total, sumsq, fingerprints(flat))


def _half_stats(flat: np.ndarray) -> RowStats:
    rows, values = flat.shape
    ext = np.empty((rows, 4), dtype=np.int32)     # uint16 max, min; int16 max, min
    fingerprint = np.empty(rows, dtype=np.uint64)
    sums = np.empty((rows, 2), dtype=np.float64)  # sum, sum of squares (float32 accumulation)
    words = -(-values * 2 // 8)
    half_rows(flat.view(np.uint16), fingerprint_weights(words), ext, fingerprint, sums)
    minimum, maximum, ok = half_values(*ext.T)
    return _finish(flat, ok, minimum, maximum, sums[:, 0].copy(), sums[:, 1].copy(),
                   fingerprint)


def _finish(x: np.ndarray, ok: np.ndarray, minimum: np.ndarray, maximum: np.ndarray,
            total: np.ndarray, sumsq: np.ndarray, fingerprint: np.ndarray) -> RowStats:
    """RowStats, with the rows not ``ok`` (NaN / inf) recomputed over their finite values."""
    finite = np.full(x.shape[0], x.shape[1], dtype=np.int64)
    for row in np.flatnonzero(~ok):
        finite[row], minimum[row], maximum[row], total[row], sumsq[row] = \
            _masked_row(x[row].astype(np.float32))
    return RowStats(finite, minimum, maximum, total, sumsq, fingerprint)


def _masked_row(values: np.ndarray) -> tuple[int, float, float, float, float]:
    """The slow path for a row holding NaN / inf (or overflowing float32 sums)."""
    ok = values[np.isfinite(values)].astype(np.float64)
    if ok.size == 0:
        return 0, np.nan, np.nan, 0.0, 0.0
    return ok.size, ok.min(), ok.max(), ok.sum(), float(ok @ ok)
