"""Polyphase resampling with scipy's default filter, designed once per rate pair.

``resample`` gives exactly what ``resample_poly`` gives with its own default anti-aliasing
filter, so a clip resampled alone (``leakpipe.audio.io`` cuts clips on the filter's phase grid)
is bit-identical to the same clip cut from the whole recording resampled at once. It calls
``upfirdn`` itself, with the filter scaled and padded as ``resample_poly`` pads it: for
44.1 kHz -> 8192 Hz (up 2048) ``resample_poly`` finds the end padding by adding one zero tap
at a time, up to ``up`` tries per call, which took longer than filtering a 3 s clip (3.6 ms a
clip, of which 1.6 ms filtering); here the padding is computed in closed form and the padded
filter is kept per ratio and input length.
"""

from __future__ import annotations

from functools import lru_cache
from math import gcd

import numpy as np
from scipy.signal import firwin, upfirdn

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
    taps, skip = _padded(up, down, len(x))
    n_out = resampled_length(len(x), sr_in, sr_out)
    return upfirdn(taps, x, up, down)[skip:skip + n_out]  # float32: taps and x are


@lru_cache(maxsize=64)
def _padded(up: int, down: int, n_in: int) -> tuple[np.ndarray, int]:
    """The filter ``resample_poly`` runs for ``n_in`` samples, and the outputs it drops first.

    Its default filter times ``up``, zero-padded in front so that the output samples fall on
    the filter's centre and at the end so that ``upfirdn`` yields every output sample wanted;
    ``resample_poly`` (scipy 1.17) does the same, finding the end padding one zero at a time.
    Clips of one recording, and recordings of one length, share ``n_in``: kept per call.
    """
    h = _lowpass(up, down) * np.float32(up)  # resample_poly: h *= up, in the signal's float32
    half = (len(h) - 1) // 2
    pre = down - half % down
    skip = (half + pre) // down
    wanted = -(-n_in * up // down) + skip  # upfirdn's outputs: ((n_in-1)*up + len_h - 1)//down + 1
    post = max(0, (wanted - 1) * down + 1 - (n_in - 1) * up - (len(h) + pre))
    taps = np.concatenate([np.zeros(pre, np.float32), h, np.zeros(post, np.float32)])
    taps.flags.writeable = False
    return taps, skip


@lru_cache(maxsize=8)
def _lowpass(up: int, down: int) -> np.ndarray:
    """The anti-aliasing filter ``resample_poly`` designs by default, designed once per ratio.

    Clips are resampled one by one, and for 44.1 kHz -> 8192 Hz (up 2048, down 11025) designing
    the 220,501 taps takes as long as filtering a clip. In float32, as resample_poly casts its
    own design to a float32 signal's type, so the output is bit-identical. Read-only: shared.
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
