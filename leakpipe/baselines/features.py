"""Per-clip baseline features from the stored log-mel (pure functions, no I/O).

A split's rows are clips of shape (L, S, M, T): long segments, short segments, mel bands and
frames (docs/data-format.md). Every (short segment, frame) column is one log-mel frame in dB.

- ``mfcc``: the DCT-II (orthonormal) of each log-mel frame along the mel axis, first ``n``
  coefficients: what ``librosa.feature.mfcc`` computes from a dB mel spectrogram.
- ``mfcc_summary``: per clip, the mean (and with ``mean_std`` the standard deviation) of the
  MFCCs over every frame of every short segment: (F, n) or (F, 2 n) features.
- ``clip_level``: per clip, the mean log-mel value in dB: the loudness of the clip, (F, 1).

Short segments overlap (build's hops), so a sample of audio weighs as often as segments cover
it; the CNN sees the same segments.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy.fft import dct

Summary = Literal["mean", "mean_std"]
SUMMARIES: tuple[str, ...] = ("mean", "mean_std")
MEL_AXIS = -2   # (..., M, T): mel bands, then frames


def mfcc(log_mel: np.ndarray, n: int) -> np.ndarray:
    """(..., M, T) dB -> (..., n, T): first ``n`` DCT-II (ortho) coefficients per frame."""
    if not 1 <= n <= log_mel.shape[MEL_AXIS]:
        raise ValueError(f"n must be in 1..{log_mel.shape[MEL_AXIS]} (mel bands), got {n}")
    coeffs = dct(np.asarray(log_mel, dtype=np.float64), type=2, norm="ortho", axis=MEL_AXIS)
    return coeffs[..., :n, :]


def frames(clips: np.ndarray) -> np.ndarray:
    """(F, L, S, K, T) -> (F, L * S * T, K): every frame of a clip as one row."""
    f, _, _, k, _ = clips.shape
    return np.moveaxis(clips, -1, -2).reshape(f, -1, k)


def mfcc_summary(clips: np.ndarray, n: int, summary: Summary) -> np.ndarray:
    """(F, L, S, M, T) log-mel -> (F, n) MFCC means, or (F, 2 n) means then stds."""
    per_frame = frames(mfcc(clips, n))                                # (F, L * S * T, n)
    if summary == "mean":
        return per_frame.mean(axis=1)
    if summary == "mean_std":
        return np.concatenate([per_frame.mean(axis=1), per_frame.std(axis=1)], axis=1)
    raise ValueError(f"summary must be one of {SUMMARIES}, got {summary!r}")


def clip_level(clips: np.ndarray) -> np.ndarray:
    """(F, L, S, M, T) log-mel -> (F, 1): the clip's mean log-mel energy in dB."""
    flat = np.asarray(clips, dtype=np.float64).reshape(clips.shape[0], -1)
    return flat.mean(axis=1, keepdims=True)


def feature_names(n: int, summary: Summary) -> tuple[str, ...]:
    """Column names of ``mfcc_summary``: mfcc0_mean ... (then mfcc0_std ...)."""
    stats = ("mean",) if summary == "mean" else ("mean", "std")
    return tuple(f"mfcc{i}_{stat}" for stat in stats for i in range(n))
