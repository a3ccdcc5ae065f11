"""leakpipe.audio.resampling: the closed-form padding gives resample_poly's very samples."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import resample_poly

from leakpipe.audio.resampling import _lowpass, ratio, resample, resampled_length


@pytest.mark.parametrize("sr_in", [7, 8000, 11025, 16000, 22050, 44100, 48000, 96000])
@pytest.mark.parametrize("n", [1, 2, 3, 97, 1000, 4093, 24_101])
def test_resample_is_resample_poly_bit_for_bit(sr_in: int, n: int) -> None:
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    up, down = ratio(sr_in, 8192)
    expected = resample_poly(x, up, down, window=_lowpass(up, down))
    got = resample(x, sr_in, 8192)
    assert got.dtype == np.float32
    assert got.shape == expected.shape == (resampled_length(n, sr_in, 8192),)
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_equal_rates_pass_through() -> None:
    x = np.arange(5, dtype=np.float32)
    assert resample(x, 8192, 8192) is x
