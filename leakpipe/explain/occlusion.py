"""Band occlusion on log-mel features: which groups of mel bands, what "removed" means.

A group is a run of ``size`` adjacent mel bands (the last one may be shorter). Occluding it sets
its log-mel values in every segment to one fill level of the recording:

- ``floor`` (default): the recording's quiet level, the median over its clips of each clip's
  5th percentile log-mel value: the bands are silenced to the level of the quietest parts of
  the spectrum, as if the pipe made no sound there;
- ``median``: the median over its clips of each clip's median log-mel value: the bands become
  typical rather than silent (a milder test; a quiet band gets louder).

One level for every band rather than each band's own floor over time: a leak is stationary, so a
band's floor over time still holds the leak, and occluding to it would remove nothing. A median
over clips (each clip one value) rather than a percentile of every value: it is computed a part
at a time for recordings of any length, and one loud clip does not move it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leakpipe.config import FeatureConfig
from leakpipe.features.mel import band_centers_hz

FILLS = ("floor", "median")
FLOOR_PERCENTILE = 5.0


@dataclass(frozen=True)
class BandGroup:
    """Mel bands ``first`` to ``last`` (inclusive) and their centre frequencies in Hz."""

    first: int
    last: int
    low_hz: float
    high_hz: float

    @property
    def label(self) -> str:
        return f"{self.low_hz:.0f}-{self.high_hz:.0f} Hz"


def band_groups(features: FeatureConfig, size: int) -> list[BandGroup]:
    """The model's mel bands in runs of ``size`` (>= 1), lowest first."""
    if size < 1:
        raise ValueError(f"bands per group must be >= 1, got {size}")
    centres = band_centers_hz(features.n_mels, features.fmin, features.fmax)    # (M,)
    return [BandGroup(a, min(a + size, features.n_mels) - 1, float(centres[a]),
                      float(centres[min(a + size, features.n_mels) - 1]))
            for a in range(0, features.n_mels, size)]


def clip_levels(mel: np.ndarray, fill: str) -> np.ndarray:
    """(clips, L, S, M, T) -> (clips,) each clip's fill statistic (see the module docstring)."""
    flat = np.asarray(mel, dtype=np.float32).reshape(len(mel), -1)
    if fill == "floor":
        return np.percentile(flat, FLOOR_PERCENTILE, axis=1)
    if fill == "median":
        return np.median(flat, axis=1)
    raise ValueError(f"fill must be one of {list(FILLS)}, got {fill!r}")


def recording_level(per_clip: np.ndarray) -> float:
    """The recording's fill level: the median of its clips' statistics."""
    return float(np.median(per_clip))


def occluded(mel: np.ndarray, group: BandGroup, level: float) -> np.ndarray:
    """A copy of (clips, L, S, M, T) ``mel`` with ``group``'s bands at ``level`` dB."""
    out = np.array(mel, dtype=np.float32, copy=True)
    out[..., group.first:group.last + 1, :] = level
    return out


def pushes(drops: np.ndarray, min_change: float) -> tuple[list[int], list[int]]:
    """(G,) drops of a score when each group is occluded -> the groups that pushed it towards
    LEAK (the drop at least ``min_change``, largest first) and those that pushed it away
    (a rise at least ``min_change``, largest first); ties: the lower band first."""
    up = [int(g) for g in np.argsort(-drops, kind="stable") if drops[g] >= min_change]
    down = [int(g) for g in np.argsort(drops, kind="stable") if drops[g] <= -min_change]
    return up, down
