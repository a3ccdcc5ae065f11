"""Signal checks of one decoded recording: clipping, DC offset and dead channels.

Each channel is checked on its own, before the mixdown, so that one clipped or dead channel is
not hidden by the others. The samples are the decoder's float32 values (full scale = 1), and
"at full scale" is judged against the sample format's own largest code: a PCM_16 field file
whose samples sit at 32767 / -32768 is clipped although no value exceeds 1. The statistics
are running sums (``SignalStats``), fed block by block as the reader decodes a recording, so a
recording of any length is checked without being in memory at once.

- ``clipped``: more than ``clip_fraction`` of a channel's samples have ``|x| >=`` the format's
  largest code minus one step (its LSB; at most float32's resolution, 2**-24).
- ``dc_offset``: ``|mean| / RMS`` of a channel exceeds ``dc_offset_max`` (1 = pure DC).
- ``dead``: a channel is constant (all zero included).

A dead channel is reported as dead only (its DC ratio and clipping say nothing more).

``truncated`` is no signal check but a finding of the reader, reported the same way: a WAV
whose header claims more frames than the file holds, or 0 frames while audio follows (a
recorder that died before it wrote the size: ``truncation``).

``DEAD_ONLY`` is the checks that need no threshold (a dead channel, refused): what the served
model applies under a detector file written before detectors held `build.quality`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leakpipe.config import QualityConfig

CLIPPED = "clipped"
DC_OFFSET = "dc_offset"
DEAD = "dead"
TRUNCATED = "truncated"  # whole file, from the reader (a flag unless in build.quality.reject)

# No recording exceeds these bounds (a share of samples, and |mean| / RMS <= 1), so only the
# dead check, which needs no threshold, can fail.
DEAD_ONLY = QualityConfig(clip_fraction=1.0, dc_offset_max=1.0, reject=(DEAD,))

FLOAT32_STEP = 2.0**-24   # spacing of float32 just below 1: nothing finer survives decoding
BLOCK_FRAMES = 2**20      # frames decoded and reduced at a time (io reads in these blocks)

# libsndfile subtype -> (largest positive decoded value, one step below it) in float32 units.
FULL_SCALE: dict[str, tuple[float, float]] = {
    "PCM_S8": (1 - 2.0**-7, 2.0**-7),
    "PCM_U8": (1 - 2.0**-7, 2.0**-7),
    "PCM_16": (1 - 2.0**-15, 2.0**-15),
    "PCM_24": (1 - 2.0**-23, 2.0**-23),
    "PCM_32": (1.0, FLOAT32_STEP),       # 2**31 - 1 rounds to 1.0 in float32
    "FLOAT": (1.0, FLOAT32_STEP),
    "DOUBLE": (1.0, FLOAT32_STEP),
    "ULAW": (32124 / 32768, 1024 / 32768),  # G.711 companding: coarse steps near full scale
    "ALAW": (32256 / 32768, 1024 / 32768),
}
OTHER_FULL_SCALE = (1.0, 2.0**-15)  # lossy / other encodings: +-1 with a 16-bit step


@dataclass(frozen=True)
class Issue:
    """One finding on one channel (-1: the whole file): the check, the channel, the measured
    value, a reason."""

    check: str
    channel: int
    value: float
    reason: str


@dataclass(frozen=True)
class ChannelStats:
    """What the checks measure on one channel."""

    clipped_fraction: float  # share of samples at (or one step below) full scale
    dc_ratio: float          # |mean| / RMS; 0 for an all-zero channel
    dead: bool               # constant (all zero included)


def clip_threshold(subtype: str) -> float:
    """``|x|`` at or above which a sample of this format counts as at full scale."""
    peak, step = FULL_SCALE.get(subtype.upper(), OTHER_FULL_SCALE)
    return peak - step


class SignalStats:
    """Running per-channel sums of ``channel_stats``, fed a recording block by block.

    A long recording never has to be in memory at once: the reader hands each decoded block to
    ``add`` and asks for ``stats`` at the end. Fed blocks of ``BLOCK_FRAMES`` frames, the sums
    are the very ones a whole-array ``channel_stats`` forms (same partition, same order).
    """

    def __init__(self, channels: int, subtype: str) -> None:
        self.threshold = np.float32(clip_threshold(subtype))
        self.frames = 0
        self.at_full = np.zeros(channels, np.int64)
        self.total = np.zeros(channels)
        self.squares = np.zeros(channels)
        self.low = np.full(channels, np.inf)
        self.high = np.full(channels, -np.inf)

    def add(self, data: np.ndarray) -> None:
        """Take in the next ``data`` (frames, channels) float32, reduced ``BLOCK_FRAMES`` at a time
        (bounds the temporaries of a large block)."""
        for start in range(0, len(data), BLOCK_FRAMES):
            block = data[start:start + BLOCK_FRAMES]  # (frames, channels)
            self.at_full += np.count_nonzero(np.abs(block) >= self.threshold, axis=0)
            self.total += block.sum(axis=0, dtype=np.float64)
            self.squares += np.square(block, dtype=np.float64).sum(axis=0)
            self.low = np.minimum(self.low, block.min(axis=0))
            self.high = np.maximum(self.high, block.max(axis=0))
        self.frames += len(data)

    def stats(self) -> list[ChannelStats]:
        """What the checks measure on each channel of the frames added so far (at least one)."""
        n = self.frames
        if n == 0:
            raise ValueError("no frames added")
        rms = np.sqrt(self.squares / n)
        dc = np.divide(np.abs(self.total / n), rms, out=np.zeros_like(rms), where=rms > 0)
        return [ChannelStats(float(self.at_full[c] / n), float(dc[c]),
                             bool(self.low[c] == self.high[c])) for c in range(len(rms))]


def channel_stats(data: np.ndarray, subtype: str) -> list[ChannelStats]:
    """Per-channel statistics of ``data`` (frames, channels) float32, streamed in blocks."""
    if data.ndim != 2 or data.shape[0] == 0:
        raise ValueError(f"expected (frames, channels) with frames > 0, got {data.shape}")
    running = SignalStats(data.shape[1], subtype)
    running.add(data)
    return running.stats()


def find_issues(stats: list[ChannelStats], cfg: QualityConfig, subtype: str) -> list[Issue]:
    """The checks that ``stats`` fail under ``cfg``, channel by channel."""
    out = []
    for c, s in enumerate(stats):
        if s.dead:
            out.append(Issue(DEAD, c, 1.0, f"channel {c} is dead (constant"
                             f"{', all zero' if s.dc_ratio == 0 else ''})"))
            continue
        if s.clipped_fraction > cfg.clip_fraction:
            out.append(Issue(CLIPPED, c, s.clipped_fraction,
                             f"channel {c} is clipped: {s.clipped_fraction:.2%} of its samples "
                             f"at {subtype} full scale (limit {cfg.clip_fraction:.2%})"))
        if s.dc_ratio > cfg.dc_offset_max:
            out.append(Issue(DC_OFFSET, c, s.dc_ratio,
                             f"channel {c} has a DC offset: |mean| / RMS = {s.dc_ratio:.2f} "
                             f"(limit {cfg.dc_offset_max:g})"))
    return out


def check_signal(data: np.ndarray, subtype: str, cfg: QualityConfig) -> list[Issue]:
    """Every issue of a decoded recording ``data`` (frames, channels) in format ``subtype``."""
    return find_issues(channel_stats(data, subtype), cfg, subtype)


def truncation(frames: int, claimed_frames: int | None) -> list[Issue]:
    """``truncated`` when the header claimed other than the frames read (value: share read).

    More claimed than there are: the recorder died mid-write. None claimed (a data size of 0)
    with frames read: it died before it wrote the size, and every whole frame to the end of
    the file was read (value 1). The frames that are there are real recording, so the file is
    kept; the issue puts it in the build report, where the reader's WARNING alone (from a
    worker process, among many lines) would be lost.
    """
    if claimed_frames == 0 and frames:
        return [Issue(TRUNCATED, -1, 1.0, f"truncated: header claims 0 frames, read {frames} "
                                          "(the data size was never written)")]
    if claimed_frames is None or claimed_frames <= frames:
        return []
    share = frames / claimed_frames
    return [Issue(TRUNCATED, -1, share, f"truncated: header claims {claimed_frames} frames, "
                                        f"read {frames} ({share:.0%})")]
