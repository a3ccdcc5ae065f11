"""Per-row statistics of float16 blocks (the fused kernel) against float64 NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

from leakpipe.validate.stats import block_stats, fingerprints

SPECIAL = np.array([0.0, -0.0, 6e-8, -6e-8, 6.1e-5, 65504, -65504, 1.5, -1.5], dtype=np.float16)


def _special_rows(n_values: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = [rng.choice(SPECIAL, n_values) for _ in range(40)]
    rows += [np.abs(rng.choice(SPECIAL, n_values)), -np.abs(rng.choice(SPECIAL, n_values)),
             np.full(n_values, -0.0), rng.normal(-40, 30, n_values)]
    return np.stack(rows).astype(np.float16)


@pytest.mark.parametrize("n_values", [1, 3, 4, 61, 10304])   # whole and part 64-bit words
def test_float16_statistics_are_exact_or_float32_close(n_values: int) -> None:
    flat = _special_rows(n_values)
    stats = block_stats(flat)
    wide = flat.astype(np.float64)
    np.testing.assert_array_equal(stats.minimum, wide.min(axis=1))
    np.testing.assert_array_equal(stats.maximum, wide.max(axis=1))
    np.testing.assert_array_equal(stats.finite, np.full(len(flat), n_values))
    scale = np.maximum(np.abs(wide).sum(axis=1), 1.0)
    assert np.all(np.abs(stats.total - wide.sum(axis=1)) <= 1e-5 * scale)
    assert np.all(np.abs(stats.sumsq - (wide**2).sum(axis=1)) <= 1e-5 * (wide**2).sum(axis=1)
                  + 1e-12)
    np.testing.assert_array_equal(stats.fingerprint, fingerprints(flat))


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, -np.nan])
def test_rows_with_inf_or_nan_count_only_their_finite_values(bad: float) -> None:
    flat = np.zeros((3, 6), np.float16)
    flat[1] = [bad, 2.0, -3.0, 0.0, 0.0, 1.0]
    flat[2] = -1.0
    stats = block_stats(flat)
    assert stats.finite.tolist() == [6, 5, 6]
    assert stats.minimum.tolist() == [0.0, -3.0, -1.0]
    assert stats.maximum.tolist() == [0.0, 2.0, -1.0]
    assert stats.total.tolist() == [0.0, 0.0, -6.0]


def test_float16_and_float32_paths_agree() -> None:
    rng = np.random.default_rng(3)
    half = rng.uniform(-100, 40, (20, 500)).astype(np.float16)
    a, b = block_stats(half), block_stats(half.astype(np.float32))
    np.testing.assert_array_equal(a.minimum, b.minimum)
    np.testing.assert_array_equal(a.maximum, b.maximum)
    np.testing.assert_allclose(a.total, b.total, rtol=1e-5)
    np.testing.assert_allclose(a.sumsq, b.sumsq, rtol=1e-5)


def test_a_non_contiguous_block_gives_the_stats_of_its_copy() -> None:
    flat = np.random.default_rng(4).uniform(-10, 10, (10, 64)).astype(np.float16)
    view = flat[::2]
    a, b = block_stats(view), block_stats(view.copy())
    np.testing.assert_array_equal(a.fingerprint, b.fingerprint)      # bits: exact
    # a strided view and its copy may be summed by different numpy loops (pairwise only on
    # contiguous rows): float32 rounding, not the same bits
    np.testing.assert_allclose(a.total, b.total, rtol=1e-6)
