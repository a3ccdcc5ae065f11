"""The waveform's level over time: RMS in dBFS per window, from the recording as it is stored.

Decoded block by block with the readers predict uses (``leakpipe.audio.io``), channels mixed by
their mean, before resampling and high-pass: the level a person listening to the file hears, so
a quiet or clipped stretch shows as it is. One value per window, so memory grows by one float
per window whatever the recording's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leakpipe.audio.io import stream_clips
from leakpipe.audio.opening import AudioSource, open_audio

SILENCE_DB = -120.0     # level of a window of digital silence (log of 0 is not a number)


@dataclass(frozen=True)
class Level:
    starts_s: np.ndarray    # (W,) window starts, seconds
    dbfs: np.ndarray        # (W,) RMS level, dB relative to full scale
    window_s: float


class _Envelope:
    """Mean squares of consecutive ``window``-sample windows of the blocks fed to it."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.rest = np.zeros(0)
        self.power: list[np.ndarray] = []

    def __call__(self, block: np.ndarray) -> None:
        mono = np.asarray(block, dtype=np.float64).mean(axis=1)        # (frames,)
        data = np.concatenate([self.rest, mono])
        whole = len(data) // self.window * self.window
        self.power.append((data[:whole].reshape(-1, self.window) ** 2).mean(axis=1))
        self.rest = data[whole:]

    def finish(self) -> np.ndarray:
        if len(self.rest):
            self.power.append(np.array([np.mean(self.rest ** 2)]))
        return np.concatenate(self.power) if self.power else np.zeros(0)


def waveform_level(recording: Path | AudioSource, window_s: float) -> Level:
    """RMS level per ``window_s`` seconds of ``recording`` (a file or samples in memory);
    raises ``AudioError`` as predict's reading does."""
    source = recording if isinstance(recording, AudioSource) else open_audio(recording)
    window = max(1, round(window_s * source.sample_rate))
    envelope = _Envelope(window)
    for _ in stream_clips(source, None, envelope):
        pass                                     # no clips planned: decode and check only
    power = envelope.finish()                                          # (W,)
    with np.errstate(divide="ignore"):
        dbfs = np.maximum(10.0 * np.log10(power), SILENCE_DB)
    return Level(np.arange(len(power)) * window / source.sample_rate, dbfs,
                 window / source.sample_rate)
