"""Read a recording as float32 mono, resample it and cut it into the clips that become HDF5 rows.

A recording opened by ``leakpipe.audio.opening`` (a file's header, or a waveform in memory) is
decoded here: by libsndfile (through soundfile), or from its RIFF chunks with numpy where
libsndfile refused the WAV or failed part-way through it. A WAV whose header claims more
frames than the file holds (a recorder that died mid-write) is read up to its last whole frame
with one WARNING; one whose data size is 0 while audio follows (the recorder died before it
wrote the size) is read the same way, with the same WARNING ("header claims 0 frames ...").
Every unusable recording raises ``AudioError`` with a one-line message naming the file and
the reason.

A recording of any length is read in bounded memory: ``open_audio`` reads its header,
``plan_clips`` places the clips, and ``stream_clips`` decodes the file once, front to back, in
blocks of ``BLOCK_FRAMES`` frames, hands each block to the caller (the signal checks of
``leakpipe.audio.quality``), mixes it down, high-passes it (``build.highpass_hz``, the filter's
state carried from block to block: ``leakpipe.audio.highpass``) and hands the frames to a
``ClipCutter`` (``leakpipe.audio.clip_cutter``), which resamples each clip on its own as soon
as its frames are in. Memory holds a block, the clips being filled and the clips made, never
the whole recording, and every clip is bit-identical to the same clip cut from the whole
recording resampled at once (see ``ClipPlan``). ``read_frames`` and ``read_audio`` still
return a whole recording, for short files and tests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from leakpipe.audio.clip_cutter import ClipCutter
from leakpipe.audio.clips import AudioError, ClipPlan, plan_clips
from leakpipe.audio.highpass import HighPass
from leakpipe.audio.opening import AudioSource, open_audio, sf_reason, unreadable
from leakpipe.audio.quality import BLOCK_FRAMES  # the checks' block: the same sums
from leakpipe.audio.riff import UnsupportedWav, decode_wav
from leakpipe.config import FeatureConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Audio:
    """A decoded recording before mixdown."""

    data: np.ndarray  # (frames, channels) float32, full scale = 1
    sample_rate: int
    subtype: str      # libsndfile's sample format: PCM_16, PCM_24, PCM_32, FLOAT, ...
    claimed_frames: int | None = None  # a truncated (or unsized: 0) WAV's header frame count


def read_audio(path: Path) -> tuple[np.ndarray, int]:
    """Read a whole recording as float32 mono in [-1, 1] (channels mixed by their mean) and its
    rate.

    A WAV whose header claims more frames than the file holds is read up to its last whole
    frame, with one WARNING. Empty, undecodable or non-finite recordings raise ``AudioError``.
    """
    audio = read_frames(path)
    return to_mono(audio.data, Path(path)), audio.sample_rate


def read_frames(path: Path) -> Audio:
    """Read every channel of a whole recording into memory (see ``read_audio``), checked.

    For short recordings and tests: the pipeline reads through ``stream_clips``, which never
    holds a whole recording.
    """
    source = open_audio(path)
    blocks: list[np.ndarray] = []
    for _ in stream_clips(source, None, blocks.append):
        pass  # no clips planned: the walk decodes and checks, the blocks are collected
    return Audio(np.concatenate(blocks), source.sample_rate, source.subtype,
                 source.claimed_frames)


def to_mono(data: np.ndarray, path: Path) -> np.ndarray:
    """(frames, channels) checked frames -> (frames,) float32 in [-1, 1] (mean of channels)."""
    x, peak = _mixdown(data)
    _warn_peak(path, peak)
    return x


def _mixdown(data: np.ndarray) -> tuple[np.ndarray, float]:
    """(frames, channels) -> their mean (frames,) float32 clipped to [-1, 1], and its peak.

    Row by row, so a recording mixed down block by block gives the same samples.
    """
    x = data.mean(axis=1, dtype=np.float32)  # (frames,)
    peak = float(np.max(np.abs(x)))
    if peak > 1.0:  # only float files can exceed full scale; PCM conversion would clip the same
        np.clip(x, -1.0, 1.0, out=x)
    return x, peak


def _warn_peak(path: Path, peak: float) -> None:
    if peak > 1.0:
        log.warning("%s: peak %.3f exceeds full scale; clipped to [-1, 1]", path, peak)


class _Decoder:
    """The frames of an ``AudioSource`` in file order, in blocks of ``BLOCK_FRAMES``.

    libsndfile decodes, unless it refused the file at open. Should it fail part-way through a
    WAV, the RIFF decoder goes on from that frame (the file's own samples, scaled as libsndfile
    scales them), as it would have taken over a whole-file read; ``how`` then says so for the
    WARNING after the read. A file that is not a WAV is then an ``AudioError``.
    """

    def __init__(self, source: AudioSource) -> None:
        self.source = source
        self.how = (f"; decoded from the RIFF chunks as libsndfile refused it ({source.refused})"
                    if source.refused else "")

    def __iter__(self) -> Iterator[np.ndarray]:
        source, done = self.source, 0
        if source.samples is not None:
            for start in range(0, source.frames, BLOCK_FRAMES):
                yield source.samples[start:start + BLOCK_FRAMES]
            return
        if not source.refused:
            try:
                with sf.SoundFile(source.path) as f:
                    while len(block := f.read(BLOCK_FRAMES, dtype="float32", always_2d=True)):
                        done += len(block)
                        yield block  # (frames, channels)
                return
            except RuntimeError as exc:
                if source.layout is None:
                    raise AudioError(unreadable(source.path, exc)) from None
                self.how = (f"; decoded from the RIFF chunks from frame {done} on as libsndfile "
                            f"failed there ({sf_reason(exc)})")
        layout = source.layout
        assert layout is not None  # refused is only set for a WAV
        for start in range(done, layout.present_frames, BLOCK_FRAMES):
            try:
                yield decode_wav(source.path, layout, start,
                                 min(BLOCK_FRAMES, layout.present_frames - start))
            except UnsupportedWav as exc:
                raise AudioError(str(exc)) from None


def stream_clips(source: AudioSource, plan: ClipPlan | None,
                 on_block: Callable[[np.ndarray], None] | None = None) -> Iterator[np.ndarray]:
    """Decode ``source`` once, block by block, and yield the clips of ``plan`` in order, each
    (clip_samples,) float32; with no plan only decode and check.

    Each block (frames, channels) goes to ``on_block`` (the signal checks, which see the
    recording as it is), then is mixed down by the mean, clipped to [-1, 1], high-passed when
    the plan says so (``ClipPlan.highpass_hz``) and cut. What needs the whole file is checked
    once it is read, before the generator ends: no frames or non-finite samples raise
    ``AudioError`` (so a caller drops the clips it already got), as does a decoder that stopped
    short of the frames its header announced when clips were planned on them; a truncated WAV,
    a RIFF fallback and samples beyond full scale are logged, one WARNING each.
    """
    path, decoder = source.path, _Decoder(source)
    cutter = ClipCutter(plan) if plan is not None else None
    highpass = _highpass(plan, path)
    read = bad = fed = 0
    peak = 0.0
    for block in decoder:
        bad += int(np.count_nonzero(~np.isfinite(block)))
        if not bad:  # a file with non-finite samples is rejected: no more work on it
            if on_block is not None:
                on_block(block)
            if cutter is not None:
                mono, block_peak = _mixdown(block)  # (frames,)
                peak = max(peak, block_peak)
                if highpass is not None:
                    mono = highpass(mono)  # the frames filtered so far (the first ones held)
                yield from cutter.feed(mono, fed)
                fed += len(mono)
        read += len(block)
    if highpass is not None and cutter is not None and not bad:
        yield from cutter.feed(highpass.flush(), fed)
    if read == 0:
        raise AudioError(f"{path}: empty (no audio frames)")
    if bad:
        raise AudioError(f"{path}: {bad} non-finite samples (NaN or inf)")
    if plan is not None and read != plan.frames_in:
        raise AudioError(f"{path}: the decoder stopped after {read} of the {plan.frames_in} "
                         "frames its header announces")
    if source.claimed_frames is not None:
        log.warning("%s: truncated: header claims %d frames, file holds %d; read %d%s",
                    path, source.claimed_frames, source.frames, read, decoder.how)
    elif decoder.how:
        log.warning("%s: read %d frames%s", path, read, decoder.how)
    _warn_peak(path, peak)


def _highpass(plan: ClipPlan | None, path: Path) -> HighPass | None:
    """The plan's high-pass of the recording (None when off); a rate too low for it is an
    ``AudioError``."""
    if plan is None or not plan.highpass_hz or not plan.n_clips:
        return None
    if plan.highpass_hz >= plan.sr_in / 2:
        raise AudioError(f"{path}: sample rate {plan.sr_in} Hz is too low for the "
                         f"{plan.highpass_hz:g} Hz high-pass (build.highpass_hz)")
    return HighPass(plan.highpass_hz, plan.sr_in, plan.frames_in)


def read_clips(source: AudioSource, plan: ClipPlan,
               on_block: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
    """Every clip of ``plan`` (see ``stream_clips``) -> (clips, clip_samples) float32."""
    clips = np.empty((plan.n_clips, plan.clip_samples), np.float32)
    for j, clip in enumerate(stream_clips(source, plan, on_block)):
        clips[j] = clip
    return clips


def load_clips(path: Path, features: FeatureConfig, n_clips: int | None,
               min_fraction: float) -> np.ndarray:
    """Read, resample to ``features.sample_rate`` and cut: (n_clips, features.clip_samples).

    Memory holds a decoded block and the clips, however long the recording.
    """
    source = open_audio(path)
    plan = plan_clips(source.frames, source.sample_rate, features, n_clips, min_fraction)
    clips = read_clips(source, plan)
    if plan.short:
        raise plan.too_short(path)
    return clips
