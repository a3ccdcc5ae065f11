"""Two-stage temporal segmentation (Ma et al. 2025): clip -> long segments -> short segments.

Both stages are strided views of the clip array, so segmenting copies nothing; the views are
read-only because their windows overlap in memory.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from leakpipe.config import FeatureConfig


def frame(x: np.ndarray, window: int, hop: int) -> np.ndarray:
    """Frames of ``window`` samples every ``hop`` along the last axis, as a read-only view.

    (..., n) -> (..., 1 + (n - window) // hop, window); a trailing partial frame is dropped.
    """
    n = x.shape[-1]
    if window < 1 or hop < 1:
        raise ValueError(f"window and hop must be >= 1, got window={window}, hop={hop}")
    if n < window:
        raise ValueError(f"signal of {n} samples is shorter than one window of {window}")
    return sliding_window_view(x, window, axis=-1)[..., ::hop, :]


def two_stage(clips: np.ndarray, features: FeatureConfig) -> np.ndarray:
    """(..., clip_samples) -> (..., n_long, n_short, short_window), a read-only view."""
    if clips.shape[-1] != features.clip_samples:
        raise ValueError(f"expected clips of {features.clip_samples} samples "
                         f"(clip_s * sample_rate), got shape {clips.shape}")
    long = frame(clips, features.long_window, features.long_hop)  # (..., n_long, long_window)
    return frame(long, features.short_window, features.short_hop)  # (..., n_long, n_short, win)
