"""Open a recording far enough to know its shape (``AudioSource``): a file's name, size and
header checked, or a waveform already in memory.

libsndfile (through soundfile) reads the header. A WAV also gets one look at its RIFF chunks
(``leakpipe.audio.riff``): a header that claims more data than the file holds (a recorder that
died mid-write) is noted for one WARNING when the file is read, a header whose data size is 0
while audio follows is taken at the frames present, and a WAV libsndfile refuses is decoded
from its chunks instead. Every unusable recording raises ``AudioError`` with a one-line message
naming the file and the reason. ``leakpipe.audio.io`` decodes what is opened here.

One reading contract: build, cv, predict, explain and serve open every file here, so a format
leakpipe does not read (``UNREAD_AUDIO_SUFFIXES``: ``.mp3``, ``.m4a`` ...; lossy codecs cut the
band and smear the broadband noise a leak makes) is refused wherever it is named, with the same
reason (``unread_format``): no detector is trained on a file it would later refuse to score.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from leakpipe.audio.clips import AudioError
from leakpipe.audio.riff import WavLayout, wav_layout, wav_subtype
from leakpipe.constants import AUDIO_SUFFIXES, UNREAD_AUDIO_SUFFIXES
from leakpipe.files import file_problem

_HEAD_BYTES = 8  # bytes of an unreadable file quoted in its error message

# libsndfile error numbers (sndfile.h); its own text for them is sometimes empty.
_SF_REASONS = {
    1: "unrecognised audio format",
    2: "system error",
    3: "malformed file",
    4: "unsupported encoding",
}


@dataclass(frozen=True)
class AudioSource:
    """A recording opened far enough to know its shape; ``leakpipe.audio.io.stream_clips``
    decodes it."""

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


def open_audio(path: Path) -> AudioSource:
    """Check a recording's name and size and read its header; raises ``AudioError``.

    libsndfile reads the header; a WAV it refuses is taken from its RIFF chunks instead. A
    sample rate that is not positive is refused here, where every reader passes, rather than
    deep in resampling. A path that is not a regular file gets its real reason (a folder, a
    symlink loop, ...: ``leakpipe.files.file_problem``), as in `index`.
    """
    path = Path(path)
    _check_name(path)
    if reason := unread_format(path):
        raise UnreadFormat(reason)
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
            raise AudioError(unreadable(path, exc)) from None
        source = AudioSource(path, layout.sample_rate, layout.channels, layout.present_frames,
                             wav_subtype(layout), claimed, layout, refused=sf_reason(exc))
    return _checked(source)


def _checked(source: AudioSource) -> AudioSource:
    """``source`` once its header is usable: a positive rate and some frames."""
    path = source.path
    if source.sample_rate <= 0:  # libsndfile refuses 0 Hz, but the RIFF chunks hold it as is
        raise AudioError(f"{path}: invalid header: sample rate {source.sample_rate} Hz")
    if source.frames == 0:
        raise AudioError(f"{path}: empty (no audio frames)")
    return source


class UnreadFormat(AudioError):
    """A file in an audio format leakpipe does not read (``unread_format`` says why)."""


def unread_format(path: Path) -> str:
    """Why ``path`` is not read (an audio format leakpipe does not read), or ""."""
    suffix = Path(path).suffix.lower()
    if suffix not in UNREAD_AUDIO_SUFFIXES:
        return ""
    return (f"{path}: {suffix} is not a format leakpipe reads (build, cv, predict and explain read "
            f"{', '.join(AUDIO_SUFFIXES)}; no detector learnt from {suffix} sound): convert "
            "it from its original, e.g. to FLAC")


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


def unreadable(path: Path, exc: RuntimeError) -> str:
    """The one-line message of a file libsndfile cannot read and that is no WAV."""
    return (f"{path}: not a readable audio format ({sf_reason(exc)}; "
            f"file starts with {_head(path)!r})")


def sf_reason(exc: RuntimeError) -> str:
    """libsndfile's reason for refusing a file, never empty (its own text sometimes is)."""
    text = str(getattr(exc, "error_string", "")).strip().rstrip(".")
    return text or _SF_REASONS.get(getattr(exc, "code", 0), "unreadable by libsndfile")


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(_HEAD_BYTES)
