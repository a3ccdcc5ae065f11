"""leakpipe.audio.resampling: the closed-form padding gives resample_poly's samples."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import resample_poly

from leakpipe.audio.resampling import _lowpass, ratio, resample, resampled_length
from tests.helpers_close import EPS32


@pytest.mark.parametrize("sr_in", [7, 8000, 11025, 16000, 22050, 44100, 48000, 96000])
@pytest.mark.parametrize("n", [1, 2, 3, 97, 1000, 4093, 24_101])
def test_resample_is_resample_poly(sr_in: int, n: int) -> None:
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    up, down = ratio(sr_in, 8192)
    expected = resample_poly(x, up, down, window=_lowpass(up, down))
    got = resample(x, sr_in, 8192)
    assert got.dtype == np.float32
    assert got.shape == expected.shape == (resampled_length(n, sr_in, 8192),)
    # the same upfirdn on the same taps (equal bits here), but another scipy may pad or sum
    # the taps its own way: float32 sums of up to 20 * down / up products (235 at 96 kHz) in
    # another order, some sqrt(235) ulp of an output sample, so 16 ulp of max |x| (4.3 here,
    # the outputs about 1); a wrong phase or padding (a shifted sample) moves noise by O(1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=16 * EPS32 * np.abs(x).max())


def test_equal_rates_pass_through() -> None:
    x = np.arange(5, dtype=np.float32)
    assert resample(x, 8192, 8192) is x
