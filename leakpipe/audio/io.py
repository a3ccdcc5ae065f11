"""Read a recording as float32 mono, resample it and cut it into the clips that become HDF5 rows.

libsndfile (through soundfile) does the decoding. WAV files get one extra look at their RIFF
chunks: a header that claims more data than the file holds (a recorder that died mid-write) is
read up to the last whole frame with one WARNING, and if libsndfile refuses such a file outright
the frames are decoded here from the RIFF chunks with numpy. Every unusable recording raises
``AudioError`` with a one-line message naming the file and the reason. ``read_frames`` keeps
the channels, the sample format and a truncated file's claimed length for the checks of
``leakpipe.audio.quality``; ``read_audio`` mixes them down.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from math import gcd
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

from leakpipe.config import FeatureConfig
from leakpipe.errors import DataError

log = logging.getLogger(__name__)

# RIFF/WAVE format tags (mmreg.h); EXTENSIBLE carries the real tag in its SubFormat GUID.
_WAVE_PCM = 0x0001
_WAVE_FLOAT = 0x0003
_WAVE_EXTENSIBLE = 0xFFFE
_UNKNOWN_SIZE = 0xFFFFFFFF  # data size written by streaming recorders: "until end of file"
_HEAD_BYTES = 8  # bytes of an unreadable file quoted in its error message

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


def read_audio(path: Path) -> tuple[np.ndarray, int]:
    """Read a recording as float32 mono in [-1, 1] (channels mixed by their mean) and its rate.

    A WAV whose header claims more frames than the file holds is read up to its last whole
    frame, with one WARNING. Empty, undecodable or non-finite recordings raise ``AudioError``.
    """
    audio = read_frames(path)
    return to_mono(audio.data, Path(path)), audio.sample_rate


def read_frames(path: Path) -> Audio:
    """Read every channel of a recording (see ``read_audio``); checks the frames are usable."""
    path = Path(path)
    _check_name(path)
    if not path.is_file():
        raise AudioError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise AudioError(f"{path}: empty (0 bytes)")
    layout = _wav_layout(path)
    try:
        data, sample_rate = sf.read(path, dtype="float32", always_2d=True)  # (frames, channels)
        subtype = sf.info(path).subtype  # the header again: the format's full scale
        how = ""
    except RuntimeError as exc:  # soundfile.LibsndfileError is a RuntimeError
        if layout is None:
            raise AudioError(f"{path}: not a readable audio format ({_sf_reason(exc)}; "
                             f"file starts with {_head(path)!r})") from None
        data, sample_rate = _decode_wav(path, layout), layout.sample_rate
        subtype = _subtype(layout)
        how = f"; decoded from the RIFF chunks as libsndfile refused it ({_sf_reason(exc)})"
    _check_frames(data, path)
    claimed = None
    if layout is not None and layout.truncated:
        claimed = layout.claimed_frames
        log.warning("%s: truncated: header claims %d frames, file holds %d; read %d%s",
                    path, claimed, layout.present_frames, len(data), how)
    elif how:
        log.warning("%s: read %d frames%s", path, len(data), how)
    return Audio(data, int(sample_rate), subtype, claimed)


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


def _check_frames(data: np.ndarray, path: Path) -> None:
    """Empty or non-finite audio is an ``AudioError``."""
    if data.shape[0] == 0:
        raise AudioError(f"{path}: empty (no audio frames)")
    bad = int(np.count_nonzero(~np.isfinite(data)))
    if bad:
        raise AudioError(f"{path}: {bad} non-finite samples (NaN or inf)")


def to_mono(data: np.ndarray, path: Path) -> np.ndarray:
    """(frames, channels) checked frames -> (frames,) float32 in [-1, 1] (mean of channels)."""
    x = data.mean(axis=1, dtype=np.float32)  # (frames,)
    peak = float(np.max(np.abs(x)))
    if peak > 1.0:  # only float files can exceed full scale; PCM conversion would clip the same
        log.warning("%s: peak %.3f exceeds full scale; clipped to [-1, 1]", path, peak)
        np.clip(x, -1.0, 1.0, out=x)
    return x


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


def _decode_wav(path: Path, layout: _WavLayout) -> np.ndarray:
    """Decode the whole frames present in a WAV's data chunk -> (frames, channels) float32."""
    n = layout.present_frames * layout.channels  # samples to read
    width = layout.block_align // layout.channels  # bytes per sample
    key = (layout.format_tag, width)
    if key == (_WAVE_PCM, 3):
        raw = np.fromfile(path, np.uint8, n * 3, offset=layout.data_offset).reshape(-1, 3)
        wide = np.zeros((len(raw), 4), np.uint8)
        wide[:, 1:] = raw  # little-endian 24 bit in the top bytes: the sign bit lands right
        values = wide.view("<i4")[:, 0].astype(np.float64) / 2.0**31
    elif key in _SAMPLE_TYPES:
        dtype, offset, scale = _SAMPLE_TYPES[key]
        raw = np.fromfile(path, dtype, n, offset=layout.data_offset)
        values = (raw.astype(np.float64) - offset) / scale
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
    if sr_in <= 0 or sr_out <= 0:
        raise ValueError(f"sample rates must be positive, got {sr_in} -> {sr_out}")
    x = np.asarray(x, dtype=np.float32)
    if sr_in == sr_out:
        return x
    g = gcd(int(sr_in), int(sr_out))
    return resample_poly(x, sr_out // g, sr_in // g, axis=-1).astype(np.float32, copy=False)


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
    if n_clips is None:
        n_clips = max(1, len(x) // max(1, clip_samples))
    if clip_samples < 1 or n_clips < 1:
        raise ValueError(f"clip_samples and n_clips must be >= 1, got {clip_samples}, {n_clips}")
    n = len(x)
    if n < clip_samples:
        need = int(np.ceil(min_fraction * clip_samples))
        if n < need:
            raise AudioError(f"too short: {n} samples, need at least {need} "
                             f"({min_fraction:g} of a {clip_samples}-sample clip)")
        padded = np.zeros(clip_samples, np.float32)  # (clip_samples,)
        padded[:n] = x
        return np.repeat(padded[None], n_clips, axis=0)  # (n_clips, clip_samples)
    starts = np.round(np.linspace(0, n - clip_samples, n_clips)).astype(np.int64)  # (n_clips,)
    index = starts[:, None] + np.arange(clip_samples)  # (n_clips, clip_samples)
    return x[index].astype(np.float32, copy=False)


def load_clips(path: Path, features: FeatureConfig, n_clips: int | None,
               min_fraction: float) -> np.ndarray:
    """Read, resample to ``features.sample_rate`` and cut: (n_clips, features.clip_samples)."""
    x, sample_rate = read_audio(path)
    return cut_clips(x, sample_rate, path, features, n_clips, min_fraction)


def cut_clips(x: np.ndarray, sample_rate: int, path: Path, features: FeatureConfig,
              n_clips: int | None, min_fraction: float) -> np.ndarray:
    """Resample mono ``x`` (n,) to ``features.sample_rate`` and cut it (see ``make_clips``)."""
    x = resample(x, sample_rate, features.sample_rate)  # (n,) at the feature rate
    try:
        return make_clips(x, features.clip_samples, n_clips, min_fraction)
    except AudioError as exc:
        seconds = len(x) / features.sample_rate
        raise AudioError(f"{path}: {exc} at {features.sample_rate} Hz ({seconds:.3f} s)") \
            from None
