"""Tests for leakpipe.features: segment counts and views, mel filterbank and log-mel vs librosa."""

from __future__ import annotations

import dataclasses

import librosa
import numpy as np
import pytest

from leakpipe.config import FeatureConfig
from leakpipe.features import clip_features, frame, log_mel, mel_filterbank, two_stage

# log-mel agreement with librosa, in dB. Both sides compute in float32; the observed gap is
# ~1e-5 dB, so 1e-3 dB leaves room for BLAS/FFT differences and still catches any real error
# (a wrong window, scale or filter shifts values by >= 0.01 dB).
DB_ATOL = 1e-3


def features(**overrides: object) -> FeatureConfig:
    """The params.yaml `build` feature defaults, with overrides."""
    base = dict(sample_rate=8192, clip_s=3.0, long_window_s=0.25, long_hop_s=0.125,
                short_window=512, short_hop=256, n_fft=512, hop_length=512, n_mels=64,
                fmin=0.0, fmax=4096.0, power=2.0, log_floor=1e-10)
    return FeatureConfig(**{**base, **overrides})


# ---------------------------------------------------------------------------------------------
# Segmentation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, window, hop, count", [
    (10, 10, 1, 1),
    (10, 4, 2, 4),
    (11, 4, 2, 4),  # the trailing partial frame is dropped
    (12, 4, 2, 5),
    (10, 3, 5, 2),  # hop > window: gaps between frames
    (24576, 2048, 1024, 23),
    (2048, 512, 256, 7),
])
def test_frame_count(n: int, window: int, hop: int, count: int) -> None:
    assert frame(np.zeros(n), window, hop).shape == (count, window)


@pytest.mark.parametrize("window, hop", [(4, 2), (5, 3), (3, 7)])
def test_frame_values_equal_slicing_without_copy(window: int, hop: int) -> None:
    x = np.arange(2 * 23, dtype=np.float32).reshape(2, 23)  # (batch, n)
    frames = frame(x, window, hop)  # (2, n_frames, window)
    expected = np.stack([[row[i * hop:i * hop + window] for i in range(frames.shape[1])]
                         for row in x])
    np.testing.assert_array_equal(frames, expected)
    assert np.shares_memory(frames, x)


def test_frame_rejects_signal_shorter_than_window() -> None:
    with pytest.raises(ValueError, match="shorter than one window"):
        frame(np.zeros(3), 4, 1)


def test_two_stage_default_counts_and_placement() -> None:
    f = features()
    clips = np.random.default_rng(0).standard_normal((2, f.clip_samples)).astype(np.float32)
    seg = two_stage(clips, f)
    assert f.clip_samples == 3 * 8192
    assert seg.shape == (2, 23, 7, 512) == (2, f.n_long, f.n_short, f.short_window)
    for clip, i, j in [(0, 0, 0), (1, 5, 3), (1, 22, 6)]:
        start = i * f.long_hop + j * f.short_hop
        np.testing.assert_array_equal(seg[clip, i, j], clips[clip, start:start + 512])


def test_two_stage_rejects_wrong_clip_length() -> None:
    with pytest.raises(ValueError, match="24576 samples"):
        two_stage(np.zeros((1, 1000), np.float32), features())


# ---------------------------------------------------------------------------------------------
# Mel filterbank and log-mel against librosa
# ---------------------------------------------------------------------------------------------

FILTERBANKS = [  # (sample_rate, n_fft, n_mels, fmin, fmax)
    (8192, 512, 64, 0.0, 4096.0),
    (8192, 256, 32, 100.0, 3000.0),
    (16000, 1024, 40, 50.0, 7000.0),
    (22050, 2048, 128, 20.0, 11025.0),
]


@pytest.mark.parametrize("sr, n_fft, n_mels, fmin, fmax", FILTERBANKS)
def test_mel_filterbank_matches_librosa(sr: int, n_fft: int, n_mels: int, fmin: float,
                                        fmax: float) -> None:
    ours = mel_filterbank(sr, n_fft, n_mels, fmin, fmax)
    ref = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax)
    assert ours.shape == (n_mels, n_fft // 2 + 1)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_mel_filterbank_is_cached_and_read_only() -> None:
    fb = mel_filterbank(8192, 512, 64, 0.0, 4096.0)
    assert mel_filterbank(8192, 512, 64, 0.0, 4096.0) is fb
    with pytest.raises(ValueError, match="read-only"):
        fb[0, 0] = 1.0


def librosa_log_mel(y: np.ndarray, f: FeatureConfig) -> np.ndarray:
    """Reference log-mel of one segment (short_window,) -> (n_mels, n_frames)."""
    spec = librosa.feature.melspectrogram(
        y=y, sr=f.sample_rate, n_fft=f.n_fft, hop_length=f.hop_length, n_mels=f.n_mels,
        fmin=f.fmin, fmax=f.fmax, center=False, power=f.power, window="hann")
    if f.power == 2.0:
        return librosa.power_to_db(spec, ref=1.0, amin=f.log_floor, top_db=None)
    return 20.0 * np.log10(np.maximum(spec, f.log_floor))


@pytest.mark.parametrize("overrides", [
    {},  # default: one frame per short segment
    {"n_fft": 128, "hop_length": 64},  # 7 frames per segment
    {"n_fft": 256, "hop_length": 100, "n_mels": 40, "fmin": 50.0, "fmax": 3500.0},
    {"power": 1.0},  # magnitude: 20 * log10
    {"power": 1.0, "n_fft": 256, "hop_length": 128, "sample_rate": 16000, "fmax": 8000.0},
])
def test_log_mel_matches_librosa(overrides: dict[str, float]) -> None:
    f = features(**overrides)
    rng = np.random.default_rng(1)
    level = rng.uniform(1e-3, 1.0, (2, 3, 1))  # different levels per segment
    segments = (rng.standard_normal((2, 3, f.short_window)) * level).astype(np.float32)
    ours = log_mel(segments, f)  # (2, 3, n_mels, n_frames)
    assert ours.shape == (2, 3, f.n_mels, f.n_frames)
    assert ours.dtype == np.float32
    ref = np.stack([[librosa_log_mel(y, f) for y in row] for row in segments])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=DB_ATOL)


def test_log_mel_floor_on_silence() -> None:
    f = features(log_floor=1e-6)
    out = log_mel(np.zeros((2, f.short_window), np.float32), f)
    np.testing.assert_allclose(out, -60.0, atol=1e-4)  # 10 * log10(1e-6)


def test_log_mel_sine_peaks_in_its_band() -> None:
    f = features()
    k = 64  # FFT bin of the tone: 64 * 8192 / 512 = 1024 Hz
    t = np.arange(f.short_window) / f.sample_rate
    tone = np.sin(2 * np.pi * k * f.sample_rate / f.n_fft * t).astype(np.float32)
    out = log_mel(tone, f)  # (n_mels, 1)
    fb = mel_filterbank(f.sample_rate, f.n_fft, f.n_mels, f.fmin, f.fmax)
    assert int(np.argmax(out[:, 0])) == int(np.argmax(fb[:, k]))


def test_clip_features_shape_and_placement() -> None:
    f = dataclasses.replace(features(), n_fft=256, hop_length=128)
    clips = np.random.default_rng(2).uniform(-1, 1, (3, f.clip_samples)).astype(np.float32)
    out = clip_features(clips, f)
    assert out.shape == (3, *f.segment_shape) == (3, 23, 7, 64, 3)
    for clip, i, j in [(0, 0, 0), (2, 11, 4), (1, 22, 6)]:
        start = i * f.long_hop + j * f.short_hop
        np.testing.assert_allclose(out[clip, i, j],
                                   log_mel(clips[clip, start:start + f.short_window], f),
                                   atol=1e-4)
