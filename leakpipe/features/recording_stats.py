"""Whole-recording level statistics: the evidence a noise logger decides on.

A leak is a continuous source: the jet at the orifice is turbulent for as long as the pipe is
under pressure, so a leaking pipe stays loud in the quietest moments of a recording and its
level varies little. Traffic, customers drawing water, pumps and machinery come and go. A
recording's low percentiles of its short-time level, and how far that level spreads, overall
and per octave band, carry this evidence; a 3 s clip's mean spectrum sees neither the quiet
moments nor the spread. Commercial noise loggers decide the same way (the minimum or a low
percentile of the night's level, and its spread).

Every statistic is computed at the recording's own sample rate (a 4096 Hz logger is never
resampled, so no band is filled with the nothing above its Nyquist frequency), on the mono
mixdown, frame by frame (``frame_s``), each frame's mean removed (DC carries no sound) and
Hann-windowed; a band level is the frame's mean-square power in that octave band in dB re
full scale. Bands whose upper edge lies above the Nyquist frequency are missing (NaN): not
zero, not a floor value. ``StatsAccumulator`` is fed the decoder's blocks one after another, so
memory holds one block and a few numbers per frame (about 1 MB per hour of recording), whatever
the recording's length.

The names (``stat_names``) and their order are the data contract's (docs/data-format.md):

- ``level_pXX``: percentiles of the overall level (the bands' range, lowest band's lower edge
  to the Nyquist frequency), dB;
- ``level_spread`` (p90 - p10) and ``level_std``, dB: gain-free;
- per band ``bandC_pXX``, ``bandC_spread``, ``bandC_std`` and ``bandC_rel`` (the band's median
  minus the overall median: the spectrum's shape, gain-free).

Absolute levels suit a network whose loggers share one calibration; the gain-free forms
(``GAIN_FREE`` suffixes) suit loggers of differing gain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from leakpipe.config import RecordingStatsConfig as StatsSpec

OVERALL = "level"
SPREAD, STD, REL = "spread", "std", "rel"
GAIN_FREE: tuple[str, ...] = (SPREAD, STD, REL)   # name suffixes that no logger gain moves
SPREAD_LOW, SPREAD_HIGH = 10.0, 90.0              # the spread is p90 - p10
OCTAVE_HALF = math.sqrt(2.0)                      # an octave band spans centre / and * sqrt(2)
MIN_FRAME = 16                                    # samples: the shortest frame there is


def band_label(centre_hz: float) -> str:
    """``63`` -> ``band63``, ``1000`` -> ``band1000``, ``31.5`` -> ``band31.5``."""
    return f"band{centre_hz:g}"


def _pct(q: float) -> str:
    return f"p{q:02g}"


def stat_names(spec: StatsSpec) -> tuple[str, ...]:
    """Every statistic's name, in stored order."""
    per = tuple(_pct(q) for q in spec.percentiles)
    names = [f"{OVERALL}_{p}" for p in per] + [f"{OVERALL}_{SPREAD}", f"{OVERALL}_{STD}"]
    for c in spec.band_centres_hz:
        b = band_label(c)
        names += [f"{b}_{p}" for p in per] + [f"{b}_{SPREAD}", f"{b}_{STD}", f"{b}_{REL}"]
    return tuple(names)


def is_gain_free(name: str) -> bool:
    return name.rsplit("_", 1)[-1] in GAIN_FREE


def band_present(centre_hz: float, sample_rate: float) -> bool:
    """An octave band is measured when its upper edge lies at or below the Nyquist frequency."""
    return centre_hz * OCTAVE_HALF <= sample_rate / 2.0


def frame_length(spec: StatsSpec, sample_rate: int) -> int:
    return max(MIN_FRAME, int(round(spec.frame_s * sample_rate)))


def _band_matrix(spec: StatsSpec, sample_rate: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(bins, bands + 1) 0/1 weights of each rfft bin per band, the overall range last; and
    (bands,) bool: which bands are present at this rate (their bins must exist, too)."""
    freqs = np.fft.rfftfreq(n, 1.0 / sample_rate)
    centres = np.asarray(spec.band_centres_hz, dtype=np.float64)
    lo, hi = centres / OCTAVE_HALF, centres * OCTAVE_HALF
    bins = (freqs[:, None] >= lo[None, :]) & (freqs[:, None] < hi[None, :])   # (K, B)
    present = np.array([band_present(c, sample_rate) for c in centres]) & bins.any(axis=0)
    bottom = lo.min() if len(lo) else 0.0
    overall = (freqs >= bottom) & (freqs > 0)
    matrix = np.concatenate([bins & present[None, :], overall[:, None]], axis=1)
    return matrix.astype(np.float64), present


class StatsAccumulator:
    """Frame levels of one recording fed block by block; ``values()`` gives the statistics."""

    def __init__(self, spec: StatsSpec, sample_rate: int) -> None:
        self.spec = spec
        self.sample_rate = int(sample_rate)
        self.n = frame_length(spec, self.sample_rate)
        window = np.hanning(self.n + 2)[1:-1]          # no zero end points: every sample counts
        self._window = window
        # |X_k|^2 * scale summed over a band's bins is the band's mean-square (Parseval, one
        # side of the spectrum doubled), for a Hann window of this length
        self._scale = 2.0 / (self.n * float(np.sum(window**2)))
        self._bands, self.present = _band_matrix(spec, self.sample_rate, self.n)
        self._carry = np.zeros(0, np.float64)
        self._levels: list[np.ndarray] = []            # per block (frames, bands + 1) dB

    def add(self, block: np.ndarray) -> None:
        """One decoded block, (frames, channels) or (frames,), in file order."""
        mono = np.asarray(block, dtype=np.float64)
        if mono.ndim == 2:
            mono = mono.mean(axis=1)
        x = np.concatenate([self._carry, mono]) if len(self._carry) else mono
        whole = len(x) // self.n
        self._carry = x[whole * self.n:].copy()
        if whole:
            self._levels.append(self._frame_levels(x[:whole * self.n].reshape(whole, self.n)))

    def _frame_levels(self, frames: np.ndarray) -> np.ndarray:
        """(F, n) samples -> (F, bands + 1) levels in dB re full scale."""
        frames = (frames - frames.mean(axis=1, keepdims=True)) * self._window   # DC removed
        power = np.abs(np.fft.rfft(frames, axis=1)) ** 2 * self._scale          # (F, K)
        band_power = power @ self._bands                                        # (F, B + 1)
        floor = 10.0 ** (self.spec.floor_db / 10.0)
        return 10.0 * np.log10(np.maximum(band_power, floor))

    @property
    def frames(self) -> int:
        return sum(len(b) for b in self._levels)

    def values(self) -> np.ndarray:
        """(S,) float32 in ``stat_names`` order; NaN for bands missing at this rate. A
        recording shorter than one frame is measured on its zero-padded samples."""
        if not self._levels:
            if not len(self._carry):
                raise ValueError("no samples to measure")
            padded = np.zeros(self.n)
            padded[:len(self._carry)] = self._carry
            self._levels.append(self._frame_levels(padded[None, :]))
        levels = np.concatenate(self._levels)                                   # (F, B + 1)
        return summarise_levels(levels, self.present, self.spec.percentiles)


def summarise_levels(levels: np.ndarray, present: np.ndarray,
                     percentiles: Sequence[float]) -> np.ndarray:
    """(F, B + 1) frame levels (overall last) and (B,) present bands -> (S,) float32 statistics
    in ``stat_names`` order. Pure: the whole of the statistics' arithmetic."""
    qs = [*percentiles, SPREAD_LOW, SPREAD_HIGH]
    pct = np.percentile(levels, qs, axis=0)                                     # (Q + 2, B + 1)
    spread = pct[-1] - pct[-2]
    std = levels.std(axis=0)
    k = len(percentiles)
    overall_median = float(np.median(levels[:, -1]))
    out = [*pct[:k, -1], spread[-1], std[-1]]
    for b, ok in enumerate(present):
        if ok:
            rel = float(np.median(levels[:, b])) - overall_median
            out += [*pct[:k, b], spread[b], std[b], rel]
        else:
            out += [math.nan] * (k + 3)
    return np.asarray(out, dtype=np.float32)


def recording_stats(samples: np.ndarray, sample_rate: int, spec: StatsSpec,
                    block: int = 1 << 20) -> np.ndarray:
    """The statistics of a whole in-memory recording (fed in blocks, as the reader does)."""
    acc = StatsAccumulator(spec, sample_rate)
    for start in range(0, len(samples), block):
        acc.add(samples[start:start + block])
    return acc.values()


__all__ = ["GAIN_FREE", "StatsAccumulator", "band_label", "band_present",
           "is_gain_free", "recording_stats", "stat_names", "summarise_levels"]
