"""Read a recording as float32 mono, resample it and cut it into the clips that become HDF5 rows.

libsndfile (through soundfile) does the decoding. WAV files get one extra look at their RIFF
chunks: a header that claims more data than the file holds (a recorder that died mid-write) is
read up to the last whole frame with one WARNING, and if libsndfile refuses such a file outright
the frames are decoded here from the RIFF chunks with numpy. A header whose data size is 0
while audio follows (the recorder died before it wrote the size; libsndfile reads no frames
from it) is recovered the same way: every whole frame to the end of the file, decoded from the
RIFF chunks, with the same WARNING ("header claims 0 frames ..."). Every unusable recording raises
``AudioError`` with a one-line message naming the file and the reason.

``waveform_source`` wraps samples already in memory (a served request) so they take the same
path as a file's.

A recording of any length is read in bounded memory: ``open_audio`` reads its header,
``plan_clips`` places the clips, and ``stream_clips`` decodes the file once, front to back, in
blocks of ``BLOCK_FRAMES`` frames, hands each block to the caller (the signal checks of
``leakpipe.audio.quality``), mixes it down, high-passes it (``build.highpass_hz``, the filter's
state carried from block to block: ``leakpipe.audio.highpass``) and copies out the frames the
clips need; each clip is resampled on its own as soon as its frames are in. Memory holds a
block, the clips being filled and the clips made, never the whole recording, and every clip is
bit-identical to the same clip cut from the whole recording resampled at once (see
``ClipPlan``). ``read_frames``
and ``read_audio`` still return a whole recording, for short files and tests.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from leakpipe.audio.clips import AudioError, ClipPlan, plan_clips
from leakpipe.audio.highpass import HighPass
from leakpipe.audio.quality import BLOCK_FRAMES  # the checks' block: the same sums
from leakpipe.audio.resampling import resample
from leakpipe.audio.riff import UnsupportedWav, WavLayout, decode_wav, wav_layout, wav_subtype
from leakpipe.config import FeatureConfig
from leakpipe.files import file_problem

log = logging.getLogger(__name__)

_HEAD_BYTES = 8  # bytes of an unreadable file quoted in its error message

# libsndfile error numbers (sndfile.h); its own text for them is sometimes empty.
_SF_REASONS = {
    1: "unrecognised audio format",
    2: "system error",
    3: "malformed file",
    4: "unsupported encoding",
}


@dataclass(frozen=True)
class Audio:
    """A decoded recording before mixdown."""

    data: np.ndarray  # (frames, channels) float32, full scale = 1
    sample_rate: int
    subtype: str      # libsndfile's sample format: PCM_16, PCM_24, PCM_32, FLOAT, ...
    claimed_frames: int | None = None  # a truncated (or unsized: 0) WAV's header frame count


@dataclass(frozen=True)
class AudioSource:
    """A recording opened far enough to know its shape; ``stream_clips`` decodes it."""

    path: Path
    sample_rate: int
    channels: int
    frames: int                 # frames in the file (a truncated WAV: its whole frames)
    subtype: str                # libsndfile's sample format: PCM_16, PCM_24, PCM_32, FLOAT, ...
    claimed_frames: int | None  # a truncated (or unsized: 0) WAV's header frame count
    layout: WavLayout | None   # its RIFF chunks, if it is a WAV
    refused: str = ""           # libsndfile's reason if it refused the file: RIFF-decoded
    samples: np.ndarray | None = None  # (frames, channels) float32 of an in-memory recording


def waveform_source(name: str, samples: np.ndarray, sample_rate: int) -> AudioSource:
    """A recording already in memory (a served request's waveform) as an ``AudioSource``.

    ``samples`` is (frames,) mono or (frames, channels), full scale = 1; it is read exactly as a
    FLOAT file's decoded samples would be, so the same samples give the same clips as a file.
    ``name`` stands for the path in messages and rows. Raises ``AudioError`` for a rate that is
    not a positive integer, a shape that is not 1-D or 2-D, or no frames.
    """
    data = np.asarray(samples)
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2 or not data.shape[1]:
        raise AudioError(f"{name}: waveform must be (frames,) or (frames, channels), "
                         f"got shape {np.shape(samples)}")
    if not data.shape[0]:
        raise AudioError(f"{name}: empty (no audio frames)")
    if not np.issubdtype(data.dtype, np.number) or np.iscomplexobj(data):
        raise AudioError(f"{name}: waveform must hold real numbers, got {data.dtype}")
    if isinstance(sample_rate, bool) or int(sample_rate) != sample_rate or sample_rate <= 0:
        raise AudioError(f"{name}: sample rate must be a positive whole number of Hz, "
                         f"got {sample_rate}")
    return AudioSource(Path(name), int(sample_rate), data.shape[1], data.shape[0], "FLOAT",
                       None, None, samples=np.ascontiguousarray(data, dtype=np.float32))


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


def open_audio(path: Path) -> AudioSource:
    """Check a recording's name and size and read its header; raises ``AudioError``.

    libsndfile reads the header; a WAV it refuses is taken from its RIFF chunks instead. A
    sample rate that is not positive is refused here, where every reader passes, rather than
    deep in resampling. A path that is not a regular file gets its real reason (a folder, a
    symlink loop, ...: ``leakpipe.files.file_problem``), as in `index`.
    """
    path = Path(path)
    _check_name(path)
    if problem := file_problem(path):
        raise AudioError(f"{path}: {problem}")
    if path.stat().st_size == 0:
        raise AudioError(f"{path}: empty (0 bytes)")
    layout = wav_layout(path)
    if layout is not None and layout.unsized:  # libsndfile believes the size: 0 frames
        return _checked(AudioSource(path, layout.sample_rate, layout.channels,
                                    layout.present_frames, wav_subtype(layout), 0, layout,
                                    refused="its data size says 0 bytes"))
    claimed = layout.claimed_frames if layout is not None and layout.truncated else None
    try:
        info = sf.info(path)
        source = AudioSource(path, int(info.samplerate), info.channels, info.frames,
                             info.subtype, claimed, layout)
    except RuntimeError as exc:  # soundfile.LibsndfileError is a RuntimeError
        if layout is None:
            raise AudioError(_unreadable(path, exc)) from None
        source = AudioSource(path, layout.sample_rate, layout.channels, layout.present_frames,
                             wav_subtype(layout), claimed, layout, refused=_sf_reason(exc))
    return _checked(source)


def _checked(source: AudioSource) -> AudioSource:
    """``source`` once its header is usable: a positive rate and some frames."""
    path = source.path
    if source.sample_rate <= 0:  # libsndfile refuses 0 Hz, but the RIFF chunks hold it as is
        raise AudioError(f"{path}: invalid header: sample rate {source.sample_rate} Hz")
    if source.frames == 0:
        raise AudioError(f"{path}: empty (no audio frames)")
    return source


def _check_name(path: Path) -> None:
    """A name that is not valid UTF-8 is an ``AudioError`` (its bytes shown as ``\\xNN``).

    Linux keeps such names (Latin-1 bytes from an old Windows share or ZIP) as they are and
    Python decodes them to lone surrogates, which libsndfile cannot be handed (soundfile encodes
    the name strictly) and an HDF5 ``recording_id`` cannot hold, so the file is rejected by
    name rather than crash the build.
    """
    name = str(path)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(name).decode("utf-8", "backslashreplace")
        raise AudioError(f"{shown}: file name is not valid UTF-8; rename the file") from None


def _unreadable(path: Path, exc: RuntimeError) -> str:
    return (f"{path}: not a readable audio format ({_sf_reason(exc)}; "
            f"file starts with {_head(path)!r})")


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


def _sf_reason(exc: RuntimeError) -> str:
    """libsndfile's reason for refusing a file, never empty (its own text sometimes is)."""
    text = str(getattr(exc, "error_string", "")).strip().rstrip(".")
    return text or _SF_REASONS.get(getattr(exc, "code", 0), "unreadable by libsndfile")


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(_HEAD_BYTES)


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
                    raise AudioError(_unreadable(source.path, exc)) from None
                self.how = (f"; decoded from the RIFF chunks from frame {done} on as libsndfile "
                            f"failed there ({_sf_reason(exc)})")
        layout = source.layout
        assert layout is not None  # refused is only set for a WAV
        for start in range(done, layout.present_frames, BLOCK_FRAMES):
            try:
                yield decode_wav(source.path, layout, start,
                                 min(BLOCK_FRAMES, layout.present_frames - start))
            except UnsupportedWav as exc:
                raise AudioError(str(exc)) from None


class _Cutter:
    """Collects each planned clip's input frames from consecutive mono blocks and resamples the
    clip as soon as they are all in; only clips that the current block reaches hold frames."""

    def __init__(self, plan: ClipPlan) -> None:
        self.plan = plan
        self.filling: dict[int, np.ndarray] = {}  # clip -> its input frames
        self.opened = 0  # clips whose input frames have begun
        self.done = 0    # clips made
        self.last: tuple[int, int, np.ndarray] | None = None  # span resampled last, and result

    def feed(self, mono: np.ndarray, pos: int) -> Iterator[np.ndarray]:
        """Take frames ``pos`` .. ``pos + len(mono)``; yield the clips they complete, in order."""
        plan, end = self.plan, pos + len(mono)
        while self.opened < plan.n_clips and plan.first[self.opened] < end:
            j = self.opened
            self.filling[j] = np.empty(plan.stop[j] - plan.first[j], np.float32)
            self.opened += 1
        for j, frames in self.filling.items():
            lo, hi = max(plan.first[j], pos), min(plan.stop[j], end)
            if hi > lo:
                frames[lo - plan.first[j]:hi - plan.first[j]] = mono[lo - pos:hi - pos]
        while self.done < self.opened and plan.stop[self.done] <= end:
            yield self._clip(self.done, self.filling.pop(self.done))
            self.done += 1

    def _clip(self, j: int, frames: np.ndarray) -> np.ndarray:
        plan = self.plan
        span = (int(plan.first[j]), int(plan.stop[j]))
        if self.last is None or self.last[:2] != span:  # a short recording's clips share one
            self.last = (*span, resample(frames, plan.sr_in, plan.sr_out))
        y = self.last[2]
        at = int(plan.starts[j]) - span[0] * plan.up // plan.down  # first is a multiple of down
        clip = np.zeros(plan.clip_samples, np.float32)  # zero-padded past a short recording
        piece = y[at:at + plan.clip_samples]
        clip[:len(piece)] = piece
        return clip


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
    cutter = _Cutter(plan) if plan is not None else None
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
