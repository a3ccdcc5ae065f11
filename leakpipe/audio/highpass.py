"""DC removal and a high-pass of a recording before it is cut into clips (``build.highpass_hz``).

A noise logger's DC offset and the water's sub-audible pressure transients (surges, pumps,
valves: a few Hz) carry no leak information: leak noise in water mains lies roughly between
100 Hz and a few kHz. Left in, both land in the lowest mel band (a DC offset in bins 0 and 1 of
every frame), as false evidence. So the mono recording, at its own rate and before it is
resampled and cut, loses its level and everything below ``highpass_hz``:

* the mean of its first ``LEVEL_S`` seconds is subtracted (the whole file's mean would need a
  second pass over a file that is decoded once, block by block), so that the filter starts
  settled: a large offset causes no start-up transient in the first clip;
* then a causal Butterworth high-pass of order ``ORDER`` (second-order sections, float64)
  removes the rest of the DC and the sub-audible band: 24 dB per octave below the cut-off, so
  at the default 20 Hz a pressure transient at 5 Hz loses 48 dB, while 100 Hz, the bottom of
  the leak band, loses under 0.001 dB (and a 1 kHz tone nothing measurable). Its phase does
  not matter: the features are power spectra, and a zero-phase (forward-backward) filter
  would need the whole recording in memory.

The filter runs at the recording's own rate, before the resampling to the feature rate: both
are linear, and the cut-off lies far below either Nyquist frequency, so the order does not
change the features, while filtering after the resampling would mean resampling the whole of
a long recording rather than only its clips. ``HighPass`` carries the filter's state (and the
level) from one decoded block to the next, so a recording filtered block by block equals the
same recording filtered whole (``highpass``), whatever the block size, to float rounding (the
same recursion, sample by sample; tests/test_highpass.py bounds it).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.signal import butter, sosfilt

ORDER = 4          # Butterworth order: 24 dB / octave below the cut-off
LEVEL_S = 0.1      # seconds at the start of a recording whose mean is subtracted


@lru_cache(maxsize=32)
def highpass_sos(cutoff_hz: float, sample_rate: int) -> np.ndarray:
    """The filter's second-order sections (ORDER // 2, 6) float64, designed once per rate.

    Raises ``ValueError`` unless 0 < cutoff_hz < sample_rate / 2. Read-only: shared.
    """
    if not 0 < cutoff_hz < sample_rate / 2:
        raise ValueError(f"high-pass cut-off {cutoff_hz:g} Hz is not between 0 and the Nyquist "
                         f"frequency {sample_rate / 2:g} Hz")
    sos = butter(ORDER, cutoff_hz, btype="highpass", fs=sample_rate, output="sos")
    sos.flags.writeable = False
    return sos


def level_frames(sample_rate: int, frames: int) -> int:
    """Frames at the start whose mean is the subtracted level: LEVEL_S seconds, at most all."""
    return max(1, min(frames, math.ceil(LEVEL_S * sample_rate)))


class HighPass:
    """The high-pass of one recording, fed its mono frames block by block, in order.

    Each call returns the filtered frames of the blocks given so far; the first
    ``level_frames`` frames are held until they are all in (their mean is the level), so a call
    may return fewer frames than it got, and ``flush`` returns what is still held at the end.
    """

    def __init__(self, cutoff_hz: float, sample_rate: int, frames: int) -> None:
        # a copy: sosfilt takes no read-only array
        self.sos = highpass_sos(float(cutoff_hz), int(sample_rate)).copy()
        self.lead = level_frames(sample_rate, frames)
        self.state = np.zeros((len(self.sos), 2))   # the sections' delays, float64
        self.level: float | None = None
        self.held: list[np.ndarray] = []

    def __call__(self, mono: np.ndarray) -> np.ndarray:
        """(n,) float32 frames in -> the frames filtered so far, float32."""
        if self.level is None:
            self.held.append(mono)
            if sum(len(h) for h in self.held) < self.lead:
                return np.zeros(0, np.float32)
            return self._start()
        return self._filter(mono)

    def flush(self) -> np.ndarray:
        """The frames still held (a recording that ended before ``level_frames``)."""
        return self._start() if self.level is None and self.held else np.zeros(0, np.float32)

    def _start(self) -> np.ndarray:
        frames = np.concatenate(self.held)
        self.held = []
        self.level = float(np.mean(frames[:self.lead], dtype=np.float64))
        return self._filter(frames)

    def _filter(self, mono: np.ndarray) -> np.ndarray:
        y, self.state = sosfilt(self.sos, mono.astype(np.float64) - self.level, zi=self.state)
        return y.astype(np.float32)


def highpass(x: np.ndarray, cutoff_hz: float, sample_rate: int) -> np.ndarray:
    """A whole mono recording (n,) with its level removed and high-passed -> (n,) float32."""
    hp = HighPass(cutoff_hz, sample_rate, len(x))
    return np.concatenate([hp(np.asarray(x, np.float32)), hp.flush()])
