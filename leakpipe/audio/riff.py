"""RIFF/WAVE parsed by hand: where a WAV's samples are and how they are encoded.

libsndfile reads WAV files, but refuses (or stops inside) some that recorders write: a header
claiming more data than the file holds (the recorder died mid-write), a data size of
0xFFFFFFFF ("until end of file"), a data size of 0 with the audio after it (the recorder died
before it went back to write the size: libsndfile then reads no frames). ``wav_layout`` walks
the chunks up to ``data`` and ``decode_wav`` decodes frames from there, scaled as libsndfile
scales them, so such a file is still read (``leakpipe.audio.io`` decides when).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# RIFF/WAVE format tags (mmreg.h); EXTENSIBLE carries the real tag in its SubFormat GUID.
_WAVE_PCM = 0x0001
_WAVE_FLOAT = 0x0003
_WAVE_EXTENSIBLE = 0xFFFE
_UNKNOWN_SIZE = 0xFFFFFFFF  # data size written by streaming recorders: "until end of file"


class UnsupportedWav(ValueError):
    """A WAV encoding this decoder does not know; the message names the file."""


@dataclass(frozen=True)
class WavLayout:
    """Where the samples of a RIFF/WAVE file are and how they are encoded."""

    format_tag: int  # _WAVE_PCM or _WAVE_FLOAT once EXTENSIBLE is resolved
    channels: int
    sample_rate: int
    bits: int
    block_align: int  # bytes per frame (all channels)
    data_offset: int  # byte offset of the first sample
    claimed_bytes: int  # size of the data chunk according to its header
    present_bytes: int  # bytes of the data chunk actually in the file
    unsized: bool = False  # size 0 but frames follow: they run to the end of the file

    @property
    def claimed_frames(self) -> int:
        return self.claimed_bytes // self.block_align

    @property
    def present_frames(self) -> int:
        """Whole frames to read: up to the claim, or to the end of an unsized data chunk."""
        there = self.present_bytes if self.unsized else min(self.claimed_bytes,
                                                            self.present_bytes)
        return there // self.block_align

    @property
    def truncated(self) -> bool:
        return self.claimed_frames > self.present_frames


def wav_layout(path: Path) -> WavLayout | None:
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
                unsized = (chunk_size == 0 and present >= block_align
                           and not _chunk_follows(f.read(8), present))
                return WavLayout(tag, channels, rate, bits, block_align, offset, claimed,
                                 present, unsized)
            else:
                f.seek(f.tell() + chunk_size + (chunk_size & 1))  # chunks are word-aligned
    return None


def _chunk_follows(header: bytes, after_data: int) -> bool:
    """Whether the bytes after a data chunk of size 0 are another chunk's header (an ID of four
    printable ASCII characters and a size that fits the file): then the recording really is
    empty, and those bytes are no audio."""
    if len(header) < 8 or not all(0x20 <= b < 0x7F for b in header[:4]):
        return False
    return 8 + struct.unpack("<I", header[4:])[0] <= after_data


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


def wav_subtype(layout: WavLayout) -> str:
    """libsndfile's subtype name for a WAV layout (what ``SoundFile.subtype`` would say)."""
    width = layout.block_align // layout.channels  # bytes per sample
    if layout.format_tag == _WAVE_FLOAT:
        return "DOUBLE" if width == 8 else "FLOAT"
    return "PCM_U8" if width == 1 else f"PCM_{8 * width}"


def decode_wav(path: Path, layout: WavLayout, start: int, frames: int) -> np.ndarray:
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
        raise UnsupportedWav(f"{path}: unsupported WAV encoding (format tag {layout.format_tag}, "
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
