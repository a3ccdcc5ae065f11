"""Read a recording as float32 mono, resample it and cut it into the clips that become HDF5 rows.

libsndfile (through soundfile) does the decoding. WAV files get one extra look at their RIFF
chunks: a header that claims more data than the file holds (a recorder that died mid-write) is
read up to the last whole frame with one WARNING, and if libsndfile refuses such a file outright
the frames are decoded here from the RIFF chunks with numpy. Every unusable recording raises
``AudioError`` with a one-line message naming the file and the reason.

A recording of any length is read in bounded memory: ``open_audio`` reads its header,
``plan_clips`` places the clips, and ``stream_clips`` decodes the file once, front to back, in
blocks of ``BLOCK_FRAMES`` frames, hands each block to the caller (the signal checks of
``leakpipe.audio.quality``), mixes it down and copies out the frames the clips need; each clip
is resampled on its own as soon as its frames are in. Memory holds a block, the clips being
filled and the clips made, never the whole recording, and every clip is bit-identical to the
same clip cut from the whole recording resampled at once (see ``ClipPlan``). ``read_frames``
and ``read_audio`` still return a whole recording, for short files and tests.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from math import gcd
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import firwin, resample_poly

from leakpipe.audio.quality import BLOCK_FRAMES  # the checks' block: the same sums
from leakpipe.config import FeatureConfig
from leakpipe.errors import DataError

log = logging.getLogger(__name__)

# RIFF/WAVE format tags (mmreg.h); EXTENSIBLE carries the real tag in its SubFormat GUID.
_WAVE_PCM = 0x0001
_WAVE_FLOAT = 0x0003
_WAVE_EXTENSIBLE = 0xFFFE
_UNKNOWN_SIZE = 0xFFFFFFFF  # data size written by streaming recorders: "until end of file"
_HEAD_BYTES = 8  # bytes of an unreadable file quoted in its error message
# scipy.signal.resample_poly's default filter: 2 * half + 1 taps, half = this * max(up, down)
_HALF_TAPS_PER_RATE = 10

# libsndfile error numbers (sndfile.h); its own text for them is sometimes empty.
_SF_REASONS = {
    1: "unrecognised audio format",
    2: "system error",
    3: "malformed file",
    4: "unsupported encoding",
}


class AudioError(DataError):
    """An unusable recording; the message is one line: ``<file>: <reason>``."""


@dataclass(frozen=True)
class _WavLayout:
    """Where the samples of a RIFF/WAVE file are and how they are encoded."""

    format_tag: int  # _WAVE_PCM or _WAVE_FLOAT once EXTENSIBLE is resolved
    channels: int
    sample_rate: int
    bits: int
    block_align: int  # bytes per frame (all channels)
    data_offset: int  # byte offset of the first sample
    claimed_bytes: int  # size of the data chunk according to its header
    present_bytes: int  # bytes of the data chunk actually in the file

    @property
    def claimed_frames(self) -> int:
        return self.claimed_bytes // self.block_align

    @property
    def present_frames(self) -> int:
        return min(self.claimed_bytes, self.present_bytes) // self.block_align

    @property
    def truncated(self) -> bool:
        return self.claimed_frames > self.present_frames


@dataclass(frozen=True)
class Audio:
    """A decoded recording before mixdown."""

    data: np.ndarray  # (frames, channels) float32, full scale = 1
    sample_rate: int
    subtype: str      # libsndfile's sample format: PCM_16, PCM_24, PCM_32, FLOAT, ...
    claimed_frames: int | None = None  # a truncated WAV's header frame count; None if whole


@dataclass(frozen=True)
class AudioSource:
    """A recording opened far enough to know its shape; ``stream_clips`` decodes it."""

    path: Path
    sample_rate: int
    channels: int
    frames: int                 # frames in the file (a truncated WAV: its whole frames)
    subtype: str                # libsndfile's sample format: PCM_16, PCM_24, PCM_32, FLOAT, ...
    claimed_frames: int | None  # a truncated WAV's header frame count; None if whole
    layout: _WavLayout | None   # its RIFF chunks, if it is a WAV
    refused: str = ""           # libsndfile's reason if it refused the file: RIFF-decoded


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

    libsndfile reads the header; a WAV it refuses is taken from its RIFF chunks instead.
    """
    path = Path(path)
    _check_name(path)
    if not path.is_file():
        raise AudioError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise AudioError(f"{path}: empty (0 bytes)")
    layout = _wav_layout(path)
    claimed = layout.claimed_frames if layout is not None and layout.truncated else None
    try:
        info = sf.info(path)
        source = AudioSource(path, int(info.samplerate), info.channels, info.frames,
                             info.subtype, claimed, layout)
    except RuntimeError as exc:  # soundfile.LibsndfileError is a RuntimeError
        if layout is None:
            raise AudioError(_unreadable(path, exc)) from None
        source = AudioSource(path, layout.sample_rate, layout.channels, layout.present_frames,
                             _subtype(layout), claimed, layout, refused=_sf_reason(exc))
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


def _wav_layout(path: Path) -> _WavLayout | None:
    """Walk the RIFF chunks up to `data`; None if the file is not a RIFF/WAVE with both chunks."""
    size = path.stat().st_size
    with path.open("rb") as f:
        riff = f.read(12)
        if len(riff) < 12 or riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
            return None
        fmt: tuple[int, int, int, int, int] | None = None
        while len(header := f.read(8)) == 8:
            chunk_id, chunk_size = header[:4], struct.unpack("<I", header[4:])[0]
            if chunk_id == b"fmt ":
                fmt = _parse_fmt(f.read(min(chunk_size, 40)))
                f.seek(f.tell() + max(chunk_size - 40, 0) + (chunk_size & 1))
            elif chunk_id == b"data":
                if fmt is None:
                    return None
                offset = f.tell()
                present = size - offset
                claimed = present if chunk_size == _UNKNOWN_SIZE else chunk_size
                tag, channels, rate, block_align, bits = fmt
                return _WavLayout(tag, channels, rate, bits, block_align, offset, claimed,
                                  present)
            else:
                f.seek(f.tell() + chunk_size + (chunk_size & 1))  # chunks are word-aligned
    return None


def _parse_fmt(body: bytes) -> tuple[int, int, int, int, int] | None:
    """(format_tag, channels, sample_rate, block_align, bits) of a `fmt ` chunk, or None."""
    if len(body) < 16:
        return None
    tag, channels, rate, _, block_align, bits = struct.unpack("<HHIIHH", body[:16])
    if tag == _WAVE_EXTENSIBLE and len(body) >= 26:
        tag = struct.unpack("<H", body[24:26])[0]  # first two bytes of the SubFormat GUID
    if channels == 0 or block_align == 0:
        return None
    return tag, channels, rate, block_align, bits


def _subtype(layout: _WavLayout) -> str:
    """libsndfile's subtype name for a WAV layout (what ``SoundFile.subtype`` would say)."""
    width = layout.block_align // layout.channels  # bytes per sample
    if layout.format_tag == _WAVE_FLOAT:
        return "DOUBLE" if width == 8 else "FLOAT"
    return "PCM_U8" if width == 1 else f"PCM_{8 * width}"


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
            yield _decode_wav(source.path, layout, start,
                              min(BLOCK_FRAMES, layout.present_frames - start))


def _decode_wav(path: Path, layout: _WavLayout, start: int, frames: int) -> np.ndarray:
    """Decode ``frames`` whole frames of a WAV's data chunk from frame ``start`` on
    -> (frames, channels) float32."""
    n = frames * layout.channels  # samples to read
    width = layout.block_align // layout.channels  # bytes per sample
    offset = layout.data_offset + start * layout.block_align
    key = (layout.format_tag, width)
    if key == (_WAVE_PCM, 3):
        raw = np.fromfile(path, np.uint8, n * 3, offset=offset).reshape(-1, 3)
        wide = np.zeros((len(raw), 4), np.uint8)
        wide[:, 1:] = raw  # little-endian 24 bit in the top bytes: the sign bit lands right
        values = wide.view("<i4")[:, 0].astype(np.float64) / 2.0**31
    elif key in _SAMPLE_TYPES:
        dtype, zero, scale = _SAMPLE_TYPES[key]
        raw = np.fromfile(path, dtype, n, offset=offset)
        values = (raw.astype(np.float64) - zero) / scale
    else:
        raise AudioError(f"{path}: unsupported WAV encoding (format tag {layout.format_tag}, "
                         f"{layout.bits} bits)")
    return values.astype(np.float32).reshape(-1, layout.channels)  # (frames, channels)


# (format tag, bytes per sample) -> (numpy dtype, offset, full scale), as libsndfile scales them.
_SAMPLE_TYPES: dict[tuple[int, int], tuple[str, float, float]] = {
    (_WAVE_PCM, 1): ("u1", 128.0, 128.0),
    (_WAVE_PCM, 2): ("<i2", 0.0, 2.0**15),
    (_WAVE_PCM, 4): ("<i4", 0.0, 2.0**31),
    (_WAVE_FLOAT, 4): ("<f4", 0.0, 1.0),
    (_WAVE_FLOAT, 8): ("<f8", 0.0, 1.0),
}


def resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """Polyphase resampling by the reduced ratio ``sr_out / sr_in``; float32, identity if equal.

    ``x`` is (n,); the result is (ceil(n * sr_out / sr_in),).
    """
    up, down = _ratio(sr_in, sr_out)
    x = np.asarray(x, dtype=np.float32)
    if up == down:
        return x
    return resample_poly(x, up, down, window=_lowpass(up, down)).astype(np.float32, copy=False)


@lru_cache(maxsize=8)
def _lowpass(up: int, down: int) -> np.ndarray:
    """The anti-aliasing filter ``resample_poly`` designs by default, designed once per ratio.

    Clips are resampled one by one, and for 44.1 kHz -> 8192 Hz (up 2048, down 11025) designing
    the 220,501 taps takes as long as filtering a clip. Given as float32, as resample_poly casts
    its own design to a float32 signal's type, so the output is bit-identical. Read-only: shared.
    """
    half = _HALF_TAPS_PER_RATE * max(up, down)
    taps = firwin(2 * half + 1, 1.0 / max(up, down), window=("kaiser", 5.0)).astype(np.float32)
    taps.flags.writeable = False
    return taps


def _ratio(sr_in: int, sr_out: int) -> tuple[int, int]:
    """(up, down): ``sr_out / sr_in`` reduced."""
    if sr_in <= 0 or sr_out <= 0:
        raise ValueError(f"sample rates must be positive, got {sr_in} -> {sr_out}")
    g = gcd(int(sr_in), int(sr_out))
    return sr_out // g, sr_in // g


def resampled_length(frames: int, sr_in: int, sr_out: int) -> int:
    """Samples of ``frames`` frames resampled by ``resample``: ceil(frames * sr_out / sr_in)."""
    up, down = _ratio(sr_in, sr_out)
    return -(-frames * up // down)


def clip_starts(n: int, clip_samples: int, n_clips: int) -> np.ndarray:
    """(n_clips,) int64 starts, evenly spaced from 0 to ``n - clip_samples`` (0 if shorter)."""
    return np.round(np.linspace(0, max(0, n - clip_samples), n_clips)).astype(np.int64)


def _count_clips(n: int, clip_samples: int, n_clips: int | None) -> int:
    """``n_clips``, or for None every non-overlapping clip of ``n`` samples (at least one)."""
    if n_clips is None:
        n_clips = max(1, n // max(1, clip_samples))
    if clip_samples < 1 or n_clips < 1:
        raise ValueError(f"clip_samples and n_clips must be >= 1, got {clip_samples}, {n_clips}")
    return n_clips


def _too_short(n: int, clip_samples: int, min_fraction: float) -> str:
    """Why ``n`` samples give no clip, or "" if they give one (zero-padded if < a clip)."""
    need = int(np.ceil(min_fraction * clip_samples))
    if n >= clip_samples or n >= need:
        return ""
    return (f"too short: {n} samples, need at least {need} "
            f"({min_fraction:g} of a {clip_samples}-sample clip)")


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
    n_clips = _count_clips(n, clip_samples, n_clips)
    if short := _too_short(n, clip_samples, min_fraction):
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
    are bit-identical to the whole-recording ones (tests/test_long_recordings.py).
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
    short: str = ""           # "too short: ..." when the recording gives no clip (none planned)

    @property
    def n_clips(self) -> int:
        return len(self.starts)

    def too_short(self, path: Path) -> AudioError:
        """The error of a recording that gives no clip (``short``), with its length."""
        seconds = self.frames_out / self.sr_out
        return AudioError(f"{path}: {self.short} at {self.sr_out} Hz ({seconds:.3f} s)")


def plan_clips(frames: int, sample_rate: int, features: FeatureConfig, n_clips: int | None,
               min_fraction: float) -> ClipPlan:
    """Place the clips of a recording of ``frames`` frames at ``sample_rate`` (see
    ``make_clips``); a recording too short for one clip gets a plan without clips and a
    ``short`` reason, so that the caller can first check what else is wrong with it."""
    up, down = _ratio(sample_rate, features.sample_rate)
    n_out = resampled_length(frames, sample_rate, features.sample_rate)
    size = features.clip_samples
    count = _count_clips(n_out, size, n_clips)
    none = np.zeros(0, np.int64)
    if short := _too_short(n_out, size, min_fraction):
        return ClipPlan(sample_rate, features.sample_rate, up, down, frames, n_out, size, none,
                        none, none, short)
    starts = clip_starts(n_out, size, count)  # (clips,)
    half = 0 if up == down else _HALF_TAPS_PER_RATE * max(up, down)  # equal rates: no filter
    # output k sums input frames i with |k * down - i * up| <= half
    first = np.maximum(0, (starts * down - half) // up // down * down)
    stop = np.minimum(frames, ((starts + size - 1) * down + half) // up + 1)
    return ClipPlan(sample_rate, features.sample_rate, up, down, frames, n_out, size, starts,
                    first, stop)


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

    Each block (frames, channels) goes to ``on_block`` (the signal checks), then is mixed down
    by the mean, clipped to [-1, 1] and cut. What needs the whole file is checked once it is
    read, before the generator ends: no frames or non-finite samples raise ``AudioError`` (so a
    caller drops the clips it already got), as does a decoder that stopped short of the frames
    its header announced when clips were planned on them; a truncated WAV, a RIFF fallback and
    samples beyond full scale are logged, one WARNING each.
    """
    path, decoder = source.path, _Decoder(source)
    cutter = _Cutter(plan) if plan is not None else None
    read = bad = 0
    peak = 0.0
    for block in decoder:
        bad += int(np.count_nonzero(~np.isfinite(block)))
        if not bad:  # a file with non-finite samples is rejected: no more work on it
            if on_block is not None:
                on_block(block)
            if cutter is not None:
                mono, block_peak = _mixdown(block)  # (frames,)
                peak = max(peak, block_peak)
                yield from cutter.feed(mono, read)
        read += len(block)
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
