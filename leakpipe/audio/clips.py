"""Where a recording's clips lie: evenly spaced from start to end, and what resampling each one
alone needs (``ClipPlan``), so ``leakpipe.audio.io`` can cut them while it streams the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leakpipe.audio.resampling import HALF_TAPS_PER_RATE, ratio, resampled_length
from leakpipe.config import FeatureConfig
from leakpipe.errors import DataError


class AudioError(DataError):
    """An unusable recording; the message is one line: ``<file>: <reason>``."""


def clip_starts(n: int, clip_samples: int, n_clips: int) -> np.ndarray:
    """(n_clips,) int64 starts, evenly spaced from 0 to ``n - clip_samples`` (0 if shorter)."""
    return np.round(np.linspace(0, max(0, n - clip_samples), n_clips)).astype(np.int64)


def count_clips(n: int, clip_samples: int, n_clips: int | None) -> int:
    """``n_clips``, or for None every non-overlapping clip of ``n`` samples (at least one)."""
    if n_clips is None:
        n_clips = max(1, n // max(1, clip_samples))
    if clip_samples < 1 or n_clips < 1:
        raise ValueError(f"clip_samples and n_clips must be >= 1, got {clip_samples}, {n_clips}")
    return n_clips


def samples_needed(clip_samples: int, min_fraction: float) -> int:
    """The fewest samples that still give one (zero-padded) clip."""
    return min(clip_samples, int(np.ceil(min_fraction * clip_samples)))


def too_short_reason(n: int, clip_samples: int, min_fraction: float) -> str:
    """Why ``n`` samples give no clip, or "" if they give one (zero-padded if < a clip)."""
    need = samples_needed(clip_samples, min_fraction)
    if n >= need:
        return ""
    return (f"too short: {n} samples, need at least {need} "
            f"({min_fraction:g} of a {clip_samples}-sample clip)")


def seconds_text(seconds: float) -> str:
    """Seconds for a person: 4 significant digits (0.0125, 1.5, 3), no trailing zeros."""
    return f"{seconds:.4g}"


def too_short_for_a_clip(frames: int, sample_rate: int, features: FeatureConfig,
                         min_fraction: float) -> str:
    """Why a recording of ``frames`` frames at ``sample_rate`` gives no clip, or "".

    Said in the recording's own terms (its seconds, samples and rate) rather than in samples
    after resampling to the model's rate, which the sender never saw; the comparison itself is
    made on the resampled length, as the clips are cut from it.
    """
    n_out = resampled_length(frames, sample_rate, features.sample_rate)
    need = samples_needed(features.clip_samples, min_fraction)
    if n_out >= need:
        return ""
    return (f"too short: {seconds_text(frames / sample_rate)} s ({frames} samples at "
            f"{sample_rate} Hz), need at least {seconds_text(need / features.sample_rate)} s "
            f"({min_fraction:g} of a {features.clip_s:g} s clip)")


def make_clips(x: np.ndarray, clip_samples: int, n_clips: int | None,
               min_fraction: float) -> np.ndarray:
    """Cut ``n_clips`` clips of ``clip_samples`` from ``x`` (n,) -> (n_clips, clip_samples).

    Clip starts are evenly spaced from 0 to n - clip_samples, so two clips are the first and the
    last ``clip_samples`` (the paper's first and last 3 s). ``n_clips=None`` takes every
    non-overlapping clip: ``n // clip_samples`` of them, spaced the same way (the remainder is
    shared out as gaps between them). A recording shorter than one clip is zero-padded at the
    end (every clip is then that one padded clip; one with ``None``) if it holds at least
    ``min_fraction * clip_samples`` samples; otherwise it raises ``AudioError``.
    """
    if x.ndim != 1:
        raise ValueError(f"expected a 1-D signal, got shape {x.shape}")
    n = len(x)
    n_clips = count_clips(n, clip_samples, n_clips)
    if short := too_short_reason(n, clip_samples, min_fraction):
        raise AudioError(short)
    if n < clip_samples:
        padded = np.zeros(clip_samples, np.float32)  # (clip_samples,)
        padded[:n] = x
        return np.repeat(padded[None], n_clips, axis=0)  # (n_clips, clip_samples)
    starts = clip_starts(n, clip_samples, n_clips)  # (n_clips,)
    index = starts[:, None] + np.arange(clip_samples)  # (n_clips, clip_samples)
    return x[index].astype(np.float32, copy=False)


@dataclass(frozen=True)
class ClipPlan:
    """Where the clips of a recording lie, at the feature rate and in the file's own frames.

    Clip ``j`` is samples ``starts[j]`` .. ``starts[j] + clip_samples`` of the whole recording
    resampled to ``sr_out`` (placed as ``make_clips`` places them; zero-padded past the end of
    a recording shorter than one clip). To make it without resampling the whole recording,
    input frames ``first[j]`` .. ``stop[j]`` are resampled on their own: ``first`` is a
    multiple of the decimation factor ``down``, so the polyphase output grid lines up with the
    whole recording's, and the span reaches the filter's half length past the clip on either
    side (or to the file's ends, where the whole-recording resampling pads with zeros as well).
    Every output sample of the clip then sums the same products in the same order: the clips
    are bit-identical to the whole-recording ones (tests/test_long_recordings.py). With
    ``highpass_hz`` > 0 the recording is first high-passed as a whole, at its own rate
    (``leakpipe.audio.highpass``, its state carried across the decoded blocks), then resampled
    and cut the same way.
    """

    sr_in: int
    sr_out: int
    up: int                   # sr_out / sr_in = up / down, reduced
    down: int
    frames_in: int
    frames_out: int           # samples of the whole recording resampled
    clip_samples: int
    starts: np.ndarray        # (clips,) int64: clip start at sr_out
    first: np.ndarray         # (clips,) int64: first input frame resampled for the clip
    stop: np.ndarray          # (clips,) int64: input frame after the last one
    short: str = ""           # "too short: <s> s (<n> samples at <rate> Hz), ..." (no clip planned)
    highpass_hz: float = 0.0  # DC removal and high-pass before resampling (0 = off)

    @property
    def n_clips(self) -> int:
        return len(self.starts)

    def too_short(self, path: Path) -> AudioError:
        """The error of a recording that gives no clip (``short`` says its length)."""
        return AudioError(f"{path}: {self.short}")


def plan_clips(frames: int, sample_rate: int, features: FeatureConfig, n_clips: int | None,
               min_fraction: float) -> ClipPlan:
    """Place the clips of a recording of ``frames`` frames at ``sample_rate`` (see
    ``make_clips``); a recording too short for one clip gets a plan without clips and a
    ``short`` reason, so that the caller can first check what else is wrong with it."""
    up, down = ratio(sample_rate, features.sample_rate)
    n_out = resampled_length(frames, sample_rate, features.sample_rate)
    size = features.clip_samples
    count = count_clips(n_out, size, n_clips)
    none = np.zeros(0, np.int64)
    if short := too_short_for_a_clip(frames, sample_rate, features, min_fraction):
        return ClipPlan(sample_rate, features.sample_rate, up, down, frames, n_out, size, none,
                        none, none, short, features.highpass_hz)
    starts = clip_starts(n_out, size, count)  # (clips,)
    half = 0 if up == down else HALF_TAPS_PER_RATE * max(up, down)  # equal rates: no filter
    # output k sums input frames i with |k * down - i * up| <= half
    first = np.maximum(0, (starts * down - half) // up // down * down)
    stop = np.minimum(frames, ((starts + size - 1) * down + half) // up + 1)
    return ClipPlan(sample_rate, features.sample_rate, up, down, frames, n_out, size, starts,
                    first, stop, highpass_hz=features.highpass_hz)
