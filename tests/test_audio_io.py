"""Tests for leakpipe.audio.io: every WAV shape, damaged files, resampling and clip placement."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from leakpipe.audio.clips import AudioError, make_clips
from leakpipe.audio.io import load_clips, read_audio
from leakpipe.audio.opening import open_audio
from leakpipe.audio.quality import TRUNCATED, truncation
from leakpipe.audio.resampling import resample
from leakpipe.config import FeatureConfig

SR = 8192

# Worst read-back error of a signal in [-0.5, 0.5] per subtype: half a quantisation step,
# plus float32 rounding.
SUBTYPE_ATOL = {"PCM_16": 2.0**-15, "PCM_24": 2.0**-23, "PCM_32": 1e-7, "FLOAT": 1e-7,
                "DOUBLE": 1e-7}
SAMPLE_BYTES = {"PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4, "DOUBLE": 8}


def features(**overrides: object) -> FeatureConfig:
    """The params.yaml `build` feature defaults, with overrides."""
    base = dict(sample_rate=SR, clip_s=3.0, long_window_s=0.25, long_hop_s=0.125,
                short_window=512, short_hop=256, n_fft=512, hop_length=512, n_mels=64,
                fmin=0.0, fmax=4096.0, power=2.0, log_floor=1e-10)
    return FeatureConfig(**{**base, **overrides})


def signal(n: int, channels: int) -> np.ndarray:
    """(n, channels) test signal: a different waveform per channel, within [-0.5, 0.5]."""
    t = np.arange(n) / SR
    waves = [0.5 * np.sin(2 * np.pi * 440 * t), np.linspace(-0.5, 0.5, n),
             0.25 * np.sign(np.sin(2 * np.pi * 50 * t))]
    return np.stack(waves[:channels], axis=1).astype(np.float32)


def write_wav(path: Path, data: np.ndarray, sr: int = SR, subtype: str = "PCM_16") -> Path:
    sf.write(path, data, sr, subtype=subtype, format="WAV")
    return path


def cut_tail(path: Path, n_bytes: int) -> None:
    """Drop the last bytes of a file, leaving its header claiming the original size."""
    data = path.read_bytes()
    path.write_bytes(data[:-n_bytes])


# ---------------------------------------------------------------------------------------------
# Reading every WAV shape
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("channels", [1, 2, 3])
@pytest.mark.parametrize("subtype", list(SUBTYPE_ATOL))
def test_read_every_subtype_and_mixdown(tmp_path: Path, subtype: str, channels: int) -> None:
    data = signal(1000, channels)  # (1000, channels)
    path = write_wav(tmp_path / "a.wav", data, subtype=subtype)
    x, sr = read_audio(path)
    assert sr == SR
    assert x.dtype == np.float32 and x.shape == (1000,)
    np.testing.assert_allclose(x, data.mean(axis=1), rtol=0, atol=SUBTYPE_ATOL[subtype])


@pytest.mark.parametrize("sr_in", [4096, 8192, 16000, 44100])
def test_resampled_tone_keeps_length_and_frequency(tmp_path: Path, sr_in: int) -> None:
    t = np.arange(sr_in) / sr_in  # 1 s
    path = write_wav(tmp_path / "tone.wav", 0.5 * np.sin(2 * np.pi * 1000.0 * t), sr=sr_in)
    x, sr = read_audio(path)
    y = resample(x, sr, SR)  # (SR,)
    assert y.dtype == np.float32 and y.shape == (SR,)
    peak_hz = np.argmax(np.abs(np.fft.rfft(y))) * SR / len(y)  # 1 Hz bins
    assert abs(peak_hz - 1000.0) <= SR / len(y)


def test_resample_identity_and_ratio() -> None:
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(resample(x, SR, SR), x)
    assert resample(x, 44100, 8192).shape == (int(np.ceil(1000 * 8192 / 44100)),)
    assert resample(x.astype(np.float64), 8000, 16000).dtype == np.float32


@pytest.mark.parametrize("subtype, n_bytes", [("PCM_16", 1001), ("PCM_24", 3000),
                                              ("FLOAT", 4), ("DOUBLE", 7999)])
def test_truncated_file_reads_frames_present(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                             subtype: str, n_bytes: int) -> None:
    data = signal(1000, 2)
    path = write_wav(tmp_path / "cut.wav", data, subtype=subtype)
    cut_tail(path, n_bytes)
    frame_bytes = data.shape[1] * SAMPLE_BYTES[subtype]
    present = 1000 - -(-n_bytes // frame_bytes)  # whole frames left after the cut
    with caplog.at_level(logging.WARNING, logger="leakpipe.audio.io"):
        x, _ = read_audio(path)
    assert x.shape == (present,)
    np.testing.assert_allclose(x, data[:present].mean(axis=1), atol=SUBTYPE_ATOL[subtype])
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "cut.wav" in record.message and "claims 1000 frames" in record.message


def test_streaming_header_size_is_not_truncation(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    # Streaming recorders write 0xFFFFFFFF ("to end of file") as the data chunk size.
    data = signal(1000, 1)
    path = write_wav(tmp_path / "stream.wav", data)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"data") + 4
    raw[at:at + 4] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="leakpipe.audio.io"):
        x, _ = read_audio(path)
    assert x.shape == (1000,)
    assert caplog.records == []


def zero_data_size(path: Path, tail: bytes = b"") -> Path:
    """Set the data chunk's size to 0, as a recorder that died before closing the file left
    it, and append ``tail``."""
    raw = bytearray(path.read_bytes())
    at = raw.index(b"data") + 4
    raw[at:at + 4] = bytes(4)
    path.write_bytes(bytes(raw) + tail)
    return path


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24", "FLOAT", "DOUBLE"])
def test_zero_data_size_reads_every_whole_frame_to_the_end(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, subtype: str) -> None:
    """Issue #35 case 9: libsndfile reads no frame from a header whose data size is 0 though
    the audio follows; it is read to the end of the file (a stray byte after the last whole
    frame dropped), with the truncated file's one WARNING, and flagged ``truncated``."""
    data = signal(1000, 2)
    path = zero_data_size(write_wav(tmp_path / "died.wav", data, subtype=subtype), b"\x01")
    with caplog.at_level(logging.WARNING, logger="leakpipe.audio.io"):
        x, _ = read_audio(path)
    np.testing.assert_allclose(x, data.mean(axis=1), atol=SUBTYPE_ATOL[subtype])
    [record] = caplog.records
    assert record.levelno == logging.WARNING and "died.wav" in record.message
    assert "truncated: header claims 0 frames, file holds 1000; read 1000" in record.message
    source = open_audio(path)
    [issue] = truncation(source.frames, source.claimed_frames)
    assert issue.check == TRUNCATED and "header claims 0 frames, read 1000" in issue.reason


def test_zero_data_size_before_another_chunk_is_an_empty_recording(tmp_path: Path) -> None:
    """A data chunk of size 0 followed by another chunk (metadata) really is empty."""
    path = write_wav(tmp_path / "empty.wav", signal(10, 1))
    raw = bytearray(path.read_bytes()[:path.read_bytes().index(b"data") + 8])
    raw[-4:] = bytes(4)
    path.write_bytes(bytes(raw) + b"LIST" + (4).to_bytes(4, "little") + b"INFO")
    with pytest.raises(AudioError, match="empty \\(no audio frames\\)"):
        open_audio(path)


@pytest.mark.parametrize("truncate", [False, True])
@pytest.mark.parametrize("subtype", list(SUBTYPE_ATOL))
def test_riff_fallback_when_libsndfile_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture, subtype: str,
                                               truncate: bool) -> None:
    # libsndfile 1.2 reads every truncated WAV we could make; other builds refuse some, so
    # simulate the refusal (at open, where libsndfile reads the header) and compare the RIFF
    # parser with libsndfile's own decoding.
    path = write_wav(tmp_path / "f.wav", signal(1000, 2), subtype=subtype)
    if truncate:
        cut_tail(path, 501)
    expected, _ = read_audio(path)

    def refuse(*args: object, **kwargs: object) -> None:
        raise sf.LibsndfileError(3, prefix="Error opening: ")

    monkeypatch.setattr(sf, "info", refuse)
    monkeypatch.setattr(sf, "SoundFile", refuse)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="leakpipe.audio.io"):
        x, sr = read_audio(path)
    assert sr == SR
    np.testing.assert_allclose(x, expected, rtol=0, atol=1e-7)
    [record] = caplog.records
    assert "RIFF" in record.message and ("truncated" in record.message) == truncate


def test_riff_decoder_takes_over_when_libsndfile_fails_part_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    import leakpipe.audio.io as audio_io

    path = write_wav(tmp_path / "f.wav", signal(1000, 2))
    expected, _ = read_audio(path)
    opened = sf.SoundFile

    class FailsAfterOneBlock:
        """libsndfile that decodes the first block, then reports a decoding error."""

        def __init__(self, *args: object) -> None:
            self.f, self.reads = opened(*args), 0

        def __enter__(self) -> FailsAfterOneBlock:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def __getattr__(self, name: str) -> object:  # sf.info reads the header through it
            return getattr(self.f, name)

        def read(self, *args: object, **kwargs: object) -> np.ndarray:
            self.reads += 1
            if self.reads > 1:
                raise sf.LibsndfileError(3, prefix="Error reading: ")
            return self.f.read(*args, **kwargs)

    monkeypatch.setattr(audio_io, "BLOCK_FRAMES", 300)
    monkeypatch.setattr(sf, "SoundFile", FailsAfterOneBlock)
    with caplog.at_level(logging.WARNING, logger="leakpipe.audio.io"):
        x, _ = read_audio(path)
    np.testing.assert_allclose(x, expected, rtol=0, atol=1e-7)
    [record] = caplog.records
    assert "read 1000 frames; decoded from the RIFF chunks from frame 300 on" in record.message


def test_a_decoder_that_stops_short_of_its_header(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Clips are placed on the header's frame count before the file is read, so fewer frames
    # than announced (a decoder stopping early without an error) cannot give the planned clips.
    path = write_wav(tmp_path / "f.wav", signal(5 * SR, 1))
    info = sf.info

    def announces_more(*args: object) -> object:
        real = info(*args)
        real.frames += SR
        return real

    monkeypatch.setattr(sf, "info", announces_more)
    with pytest.raises(AudioError, match=rf"f\.wav: the decoder stopped after {5 * SR} of the "
                                         rf"{6 * SR} frames its header announces"):
        load_clips(path, features(), 2, 0.5)
    assert read_audio(path)[0].shape == (5 * SR,)  # a whole-file read takes what is there


# ---------------------------------------------------------------------------------------------
# Unusable files
# ---------------------------------------------------------------------------------------------


def empty_file(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def header_only_wav(path: Path) -> Path:
    return write_wav(path, np.zeros((0, 1), np.float32))


def text_file(path: Path) -> Path:
    path.write_text("time,pressure\n0.0,1.2\n0.1,1.3\n" * 20)
    return path


def nan_wav(path: Path) -> Path:
    data = signal(100, 1)
    data[50] = np.nan
    return write_wav(path, data, subtype="FLOAT")


def inf_wav(path: Path) -> Path:
    data = signal(100, 2)
    data[10, 1] = np.inf
    return write_wav(path, data, subtype="DOUBLE")


def rate_zero_wav(path: Path) -> Path:
    """A mono PCM_16 WAV whose `fmt ` chunk says 0 Hz (libsndfile refuses it; RIFF would not)."""
    data = bytearray(write_wav(path, signal(100, 1)).read_bytes())
    assert data[12:16] == b"fmt " and int.from_bytes(data[24:28], "little") == SR
    data[24:28] = bytes(4)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("make, reason", [
    (empty_file, "empty"),
    (header_only_wav, "empty"),
    (text_file, "not a readable audio format"),
    (nan_wav, "non-finite"),
    (inf_wav, "non-finite"),
    (rate_zero_wav, "sample rate 0 Hz"),
])
def test_unusable_file_raises_one_line_naming_it(tmp_path: Path, make: Callable[[Path], Path],
                                                 reason: str) -> None:
    path = make(tmp_path / "bad.wav")
    with pytest.raises(AudioError, match=reason) as info:
        read_audio(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message and message.isascii()


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(AudioError, match="no such file"):
        read_audio(tmp_path / "nope.wav")


def test_float_over_full_scale_is_clipped_with_warning(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    path = write_wav(tmp_path / "loud.wav", np.array([0.5, 1.5, -2.0], np.float32),
                     subtype="FLOAT")
    with caplog.at_level(logging.WARNING, logger="leakpipe.audio.io"):
        x, _ = read_audio(path)
    np.testing.assert_array_equal(x, [0.5, 1.0, -1.0])
    assert "clipped" in caplog.text


# ---------------------------------------------------------------------------------------------
# Clips
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_clips, starts_s", [
    (1, [0]),
    (2, [0, 2]),  # the paper: first and last 3 s of a 5 s recording
    (3, [0, 1, 2]),
])
def test_clip_placement_on_ramp(n_clips: int, starts_s: list[int]) -> None:
    sr = 100
    ramp = np.arange(5 * sr, dtype=np.float32)  # value = sample index
    clips = make_clips(ramp, 3 * sr, n_clips, 0.5)
    assert clips.shape == (n_clips, 3 * sr) and clips.dtype == np.float32
    np.testing.assert_array_equal(clips[:, 0], np.array(starts_s) * sr)
    np.testing.assert_array_equal(np.diff(clips, axis=1), 1.0)  # contiguous samples


@pytest.mark.parametrize("seconds, starts_s", [
    (3, [0]),
    (5, [0]),           # 5 // 3 = 1 whole clip
    (6, [0, 3]),
    (10, [0, 3.5, 7]),  # 3 clips, the 1 s left over shared out as gaps
    (9.5, [0, 3.25, 6.5]),
])
def test_all_clips_are_every_non_overlapping_clip(seconds: float, starts_s: list[float]) -> None:
    sr = 100
    ramp = np.arange(int(seconds * sr), dtype=np.float32)  # value = sample index
    clips = make_clips(ramp, 3 * sr, None, 0.5)
    assert clips.shape == (len(starts_s), 3 * sr)
    np.testing.assert_array_equal(clips[:, 0], np.round(np.array(starts_s) * sr))
    assert (np.diff(clips[:, 0]) >= 3 * sr).all()  # no clip overlaps the next


def test_all_clips_of_a_short_recording_is_one_padded_clip() -> None:
    clips = make_clips(np.ones(60, np.float32), 100, None, 0.5)
    assert clips.shape == (1, 100) and clips[0, 59] == 1.0 and clips[0, 60] == 0.0


def test_short_recording_is_zero_padded() -> None:
    x = np.ones(60, np.float32)
    clips = make_clips(x, 100, 2, 0.5)
    assert clips.shape == (2, 100)
    np.testing.assert_array_equal(clips[0], clips[1])
    np.testing.assert_array_equal(clips[0, :60], 1.0)
    np.testing.assert_array_equal(clips[0, 60:], 0.0)


def test_too_short_recording_raises() -> None:
    with pytest.raises(AudioError, match="too short: 40 samples, need at least 50"):
        make_clips(np.ones(40, np.float32), 100, 2, 0.5)


def test_load_clips_resamples_and_cuts(tmp_path: Path) -> None:
    sr_in = 16000
    ramp = np.linspace(-0.5, 0.5, 5 * sr_in)
    path = write_wav(tmp_path / "rec.wav", ramp, sr=sr_in, subtype="FLOAT")
    f = features()
    clips = load_clips(path, f, 2, 0.5)
    assert clips.shape == (2, f.clip_samples) and clips.dtype == np.float32
    # first clip starts at the ramp's start, the last ends at its end (away from filter edges)
    np.testing.assert_allclose(clips[0, 100], -0.5 + 100 / (5 * SR), atol=1e-4)
    np.testing.assert_allclose(clips[1, -100], 0.5 - 99 / (5 * SR), atol=1e-4)


def test_load_clips_too_short_names_file(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "short.wav", np.zeros(SR), sr=SR)  # 1 s < 0.5 * 3 s
    with pytest.raises(AudioError, match=rf"short\.wav: too short: 1 s \({SR} samples at {SR} "
                                         r"Hz\), need at least 1\.5 s \(0\.5 of a 3 s clip\)"):
        load_clips(path, features(), 2, 0.5)
