"""What the mel bands above a band-limited recording's Nyquist frequency look like, measured.

A logger at 4096 Hz records nothing above 2048 Hz, but its recording, resampled to the model's
8192 Hz, is not silent there: the polyphase resampler's anti-imaging filter lets through an
attenuated mirror image of the band below the Nyquist frequency. Measured through the build's
own path (white noise at 4096 Hz, default features: 8192 Hz, 64 bands up to 4096 Hz, 20 Hz
high-pass), relative to the same noise recorded at the full rate:

* bands below about 1.85 kHz: within 0.3 dB (the first to lose more than ``CHANGED_DB``, and
  so to be replaced, spans 1861-2007 Hz: band 44 of 64);
* 1.85-2.25 kHz, the filter's transition: -2 to -13 dB;
* 2.25-2.5 kHz: -20 to -51 dB, then the stop band: -60 to -69 dB up to 4096 Hz.

So an empty band is neither the log floor (-100 dB) nor a constant: it follows the level of
the in-band content it mirrors, some 60 dB down, and reaches the floor only in quiet
recordings. ``empty_bands`` measures this profile for any feature config and Nyquist
frequency, with white noise through ``waveform_source`` / ``plan_clips`` / ``read_clips`` /
``clip_features`` (what build and predict run), and describes each affected band ``m`` as
``max(x[source[m]] + atten_db[m], floor_db)`` of the full-band values ``x`` of the same
segment: ``source`` is the band itself below the Nyquist frequency and the band at the mirror
frequency above it. ``leakpipe.data.augment`` uses it to band-limit training files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from leakpipe.audio.clips import plan_clips
from leakpipe.audio.io import read_clips
from leakpipe.audio.opening import waveform_source
from leakpipe.config import FeatureConfig
from leakpipe.features.mel import band_centers_hz, clip_features

__all__ = ["CHANGED_DB", "EmptyBands", "empty_bands"]

CHANGED_DB = 1.0       # a band the band limit lowers by more than this, in white noise, is replaced
NOISE_RMS = 0.1        # of the full-rate white noise; the narrow one has the same density
NOISE_CLIPS = 16       # clips of noise measured (16 x 161 segments at the default features)


@dataclass(frozen=True)
class EmptyBands:
    """The bands a recording with Nyquist frequency ``nyquist_hz`` leaves empty, measured.

    Band ``m >= first`` of such a recording is ``max(x[source[m]] + atten_db[m], floor_db)``
    where ``x`` are the same segment's log-mel values (dB) recorded at the full rate; the bands
    below ``first`` are as they were (``source[m] = m``, ``atten_db[m] = 0``).
    """

    nyquist_hz: float
    first: int                 # the lowest band replaced (n_mels: none)
    source: np.ndarray         # (n_mels,) int64: the band whose content each band images
    atten_db: np.ndarray       # (n_mels,) float32: its level relative to that band
    floor_db: float            # the features' log floor, dB
    level_db: np.ndarray       # (n_mels,) float64: the measured band-limited noise, dB (report)

    @property
    def replaced(self) -> np.ndarray:
        """(n_mels,) bool: the bands replaced."""
        return np.arange(len(self.source)) >= self.first


def floor_db(features: FeatureConfig) -> float:
    """The log-mel value of a band with no energy (``log_floor`` in dB)."""
    return 20.0 / features.power * math.log10(features.log_floor)


@lru_cache(maxsize=16)
def empty_bands(features: FeatureConfig, nyquist_hz: float) -> EmptyBands:
    """Measure ``EmptyBands`` for a logger at ``2 * nyquist_hz`` Hz (an integer rate).

    White noise at the model's rate and at the logger's (the same power density, so that the
    bands below the Nyquist frequency agree) goes through the feature path; the bands whose
    mean drops by more than ``CHANGED_DB`` (from the first one on) are replaced. Deterministic
    (fixed seeds); cached per feature config and frequency.
    """
    rate = 2 * nyquist_hz
    if rate != int(rate) or rate < 1:
        raise ValueError(f"band limit {nyquist_hz:g} Hz is not half an integer sample rate")
    rate, n_mels = int(rate), features.n_mels
    if rate >= features.sample_rate:     # resampled down or not at all: nothing left empty
        zeros = np.zeros(n_mels)
        return EmptyBands(float(nyquist_hz), n_mels, np.arange(n_mels), zeros.astype(np.float32),
                          floor_db(features), zeros)
    full = _noise_level(features, features.sample_rate, 1.0, seed=0)            # (M,)
    narrow = _noise_level(features, rate, math.sqrt(rate / features.sample_rate), seed=1)
    kept = np.flatnonzero(narrow - full >= -CHANGED_DB)
    first = int(kept[-1]) + 1 if len(kept) else 0     # every band above it is replaced
    source = np.arange(n_mels)
    centres = band_centers_hz(n_mels, features.fmin, features.fmax)           # (M,)
    for m in range(first, n_mels):
        if centres[m] > nyquist_hz:
            source[m] = _nearest(centres, _fold(centres[m], nyquist_hz))
    atten = np.where(np.arange(n_mels) >= first, narrow - full[source], 0.0)
    return EmptyBands(float(nyquist_hz), first, source.astype(np.int64),
                      atten.astype(np.float32), floor_db(features), narrow)


def _noise_level(features: FeatureConfig, rate: int, gain: float, seed: int) -> np.ndarray:
    """(M,) mean log-mel of white noise at ``rate`` Hz, NOISE_RMS * ``gain``, through the
    feature path (resampled to the model's rate, high-passed, cut, two-stage log-mel)."""
    seconds = NOISE_CLIPS * features.clip_s
    n = int(round(seconds * rate))
    x = NOISE_RMS * gain * np.random.default_rng(seed).standard_normal(n)
    source = waveform_source("white noise", x.astype(np.float32), rate)
    plan = plan_clips(source.frames, rate, features, NOISE_CLIPS, 1.0)
    mel = clip_features(read_clips(source, plan), features)      # (C, L, S, M, T)
    return np.moveaxis(mel, -2, 0).reshape(features.n_mels, -1).mean(axis=1, dtype=np.float64)


def _fold(hz: float, nyquist_hz: float) -> float:
    """The frequency below ``nyquist_hz`` whose image the resampler leaves at ``hz``."""
    hz = hz % (2 * nyquist_hz)
    return 2 * nyquist_hz - hz if hz > nyquist_hz else hz


def _nearest(centres: np.ndarray, hz: float) -> int:
    """The band whose centre is nearest to ``hz``."""
    return int(np.argmin(np.abs(centres - hz)))
