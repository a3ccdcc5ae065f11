"""Polyphase resampling with scipy's default filter, designed once per rate pair.

``resample`` is ``resample_poly`` with its own default anti-aliasing filter passed in, so a
clip resampled alone (``leakpipe.audio.io`` cuts clips on the filter's phase grid) is
bit-identical to the same clip cut from the whole recording resampled at once.
"""

from __future__ import annotations

from functools import lru_cache
from math import gcd

import numpy as np
from scipy.signal import firwin, resample_poly

# scipy.signal.resample_poly's default filter: 2 * half + 1 taps, half = this * max(up, down)
HALF_TAPS_PER_RATE = 10


def resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """Polyphase resampling by the reduced ratio ``sr_out / sr_in``; float32, identity if equal.

    ``x`` is (n,); the result is (ceil(n * sr_out / sr_in),).
    """
    up, down = ratio(sr_in, sr_out)
    x = np.asarray(x, dtype=np.float32)
    if up == down:
        return x
    return resample_poly(x, up, down, window=_lowpass(up, down)).astype(np.float32, copy=False)


@lru_cache(maxsize=8)
def _lowpass(up: int, down: int) -> np.ndarray:
    """The anti-aliasing filter ``resample_poly`` designs by default, designed once per ratio.

    Clips are resampled one by one, and for 44.1 kHz -> 8192 Hz (up 2048, down 11025) designing
    the 220,501 taps takes as long as filtering a clip. Given as float32, as resample_poly casts
    its own design to a float32 signal's type, so the output is bit-identical. Read-only: shared.
    """
    half = HALF_TAPS_PER_RATE * max(up, down)
    taps = firwin(2 * half + 1, 1.0 / max(up, down), window=("kaiser", 5.0)).astype(np.float32)
    taps.flags.writeable = False
    return taps


def ratio(sr_in: int, sr_out: int) -> tuple[int, int]:
    """(up, down): ``sr_out / sr_in`` reduced."""
    if sr_in <= 0 or sr_out <= 0:
        raise ValueError(f"sample rates must be positive, got {sr_in} -> {sr_out}")
    g = gcd(int(sr_in), int(sr_out))
    return sr_out // g, sr_in // g


def resampled_length(frames: int, sr_in: int, sr_out: int) -> int:
    """Samples of ``frames`` frames resampled by ``resample``: ceil(frames * sr_out / sr_in)."""
    up, down = ratio(sr_in, sr_out)
    return -(-frames * up // down)
