"""Recordings of any length in bounded memory (issue #14 item 6).

`build` and `predict` decode a recording block by block and resample each clip on its own
(``leakpipe.audio.io.stream_clips``). ``whole_file_clips`` below is the path they replaced, kept
here as the reference: read the whole file, mix it down, high-pass it when the features say so
(``build.highpass_hz``), resample all of it, cut. The clips and features of the block-wise path
must equal it within float32 rounding (a sum may be taken in another SIMD order), its memory
must not grow with the length of the recording, and a long recording scored in parts must get
the row it got before.
"""

from __future__ import annotations

import dataclasses
import math
import tracemalloc
from collections.abc import Callable
from functools import partial
from math import gcd
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from scipy.signal import butter, resample_poly, sosfilt

import leakpipe.audio.io as audio_io
from leakpipe.audio.io import load_clips, read_frames
from leakpipe.audio.quality import check_signal, truncation
from leakpipe.build import build
from leakpipe.build_recording import RecordingJob, process_recording
from leakpipe.cli import main
from leakpipe.config import BuildConfig, FeatureConfig, ModelConfig
from leakpipe.constants import BINARY_CLASSES, KNOWN_CLASSES
from leakpipe.data import open_split
from leakpipe.decision.domain import band_profile
from leakpipe.decision.voting import VotingConfig
from leakpipe.detector import Detector, load_detector, save_detector
from leakpipe.features.mel import clip_features
from leakpipe.model import create_model
from leakpipe.predict.clips import predict
from leakpipe.predict.inputs import prepare
from leakpipe.predict.rows import Prepared, result_row
from leakpipe.predict.rules import scoring_rules
from leakpipe.predict.scoring import score_segments
from leakpipe.runtime import make_runtime
from leakpipe.scoring.batching import BatchLimits
from tests.helpers_close import assert_floats_close
from tests.helpers_detector import restore_logging
from tests.helpers_h5 import SMALL_FEATURES
from tests.helpers_predict import read_predictions, text_row

_keep_logging = pytest.fixture(autouse=True)(restore_logging)


# -- the reference: today's whole-file path ---------------------------------------------------


def whole_file_clips(path: Path, f: FeatureConfig, n_clips: int | None) -> np.ndarray:
    """What `build` did before: the whole file in memory, resampled at once, then cut; with
    ``f.highpass_hz``, first less the mean of its first 0.1 s and through a 4th-order
    Butterworth high-pass (float64, from rest) at its own rate."""
    data, rate = sf.read(path, dtype="float32", always_2d=True)      # (frames, channels)
    x = data.mean(axis=1, dtype=np.float32)                          # (frames,)
    np.clip(x, -1.0, 1.0, out=x)
    if f.highpass_hz:
        sos = butter(4, f.highpass_hz, btype="highpass", fs=rate, output="sos")
        level = np.mean(x[:math.ceil(0.1 * rate)], dtype=np.float64)
        x = sosfilt(sos, x.astype(np.float64) - level).astype(np.float32)
    g = gcd(rate, f.sample_rate)
    if rate != f.sample_rate:
        x = resample_poly(x, f.sample_rate // g, rate // g).astype(np.float32)
    n, size = len(x), f.clip_samples
    if n < size:                                                     # zero-padded
        padded = np.zeros(size, np.float32)
        padded[:n] = x
        return np.repeat(padded[None], n_clips or 1, axis=0)
    n_clips = n_clips or n // size
    starts = np.round(np.linspace(0, n - size, n_clips)).astype(np.int64)
    return x[starts[:, None] + np.arange(size)]                      # (clips, size)


def write(path: Path, seconds: float, rate: int, channels: int, subtype: str,
          seed: int = 0, loud: bool = False) -> Path:
    """Noise with a tone per channel; ``loud``: a float file with peaks beyond full scale."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * rate))
    t = np.arange(n) / rate
    x = 0.2 * rng.standard_normal((n, channels)) + 0.2 * np.sin(
        2 * np.pi * (50.0 + 100.0 * np.arange(channels)) * t[:, None])
    if loud:
        x[::977] = 1.7
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, x.astype(np.float32), rate, subtype=subtype)
    return path


# -- clip by clip == whole file -----------------------------------------------------------------


@pytest.mark.parametrize("seconds, rate, channels, subtype, n_clips, block", [
    (300.0, 8000, 2, "PCM_16", None, None),     # 5 min, 3 blocks of 2**20 frames, every clip
    (300.0, 8000, 2, "PCM_16", 2, 4099),        # the paper's two clips; blocks end inside them
    (70.3, 11025, 1, "FLOAT", None, 10007),     # coprime rates: a 220501-tap filter; > full scale
    (95.5, 4096, 3, "PCM_24", None, 3000),      # the feature rate itself: no resampling
    (0.7, 44100, 2, "PCM_16", 3, 1000),         # shorter than a clip: zero-padded, three times
])
def test_clip_by_clip_equals_whole_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        seconds: float, rate: int, channels: int, subtype: str,
                                        n_clips: int | None, block: int | None) -> None:
    path = write(tmp_path / "long.wav", seconds, rate, channels, subtype,
                 loud=subtype == "FLOAT")
    if block is not None:
        monkeypatch.setattr(audio_io, "BLOCK_FRAMES", block)
    clips = load_clips(path, SMALL_FEATURES, n_clips, 0.5)
    expected = whole_file_clips(path, SMALL_FEATURES, n_clips)
    assert clips.shape == expected.shape and clips.dtype == np.float32
    # Two computations of each sample: the blocked path filters and resamples block by block,
    # the whole-file path in one call, so a filter's sum (up to 220501 taps) may be taken in
    # another SIMD order: a few float32 ulp of the signal's scale, and more on a long filter.
    # 1e-5 of the peak bounds that with room; a sample shifted or dropped at a block edge
    # moves a noise clip by the order of the peak.
    np.testing.assert_allclose(clips, expected, rtol=0,
                               atol=1e-5 * float(np.abs(expected).max()))


# -- build: features equal to the whole-file path within rounding ----------------------------

# (class, seconds, rate, channels, subtype) per site: every rate class, padded and long files
CORPUS = [
    ("LEAK", 2.5, 44100, 2, "PCM_16"), ("NORMAL", 1.0, 16000, 1, "FLOAT"),
    ("BACKGROUND", 7.3, 48000, 1, "PCM_24"), ("LEAK", 0.8, 8000, 1, "PCM_16"),
    ("NORMAL", 12.0, 11025, 3, "PCM_16"), ("BACKGROUND", 3.0, 4096, 2, "FLOAT"),
]


@pytest.mark.parametrize("clips_per_recording", [2, "all"])
def test_build_features_equal_the_whole_file_path(tmp_path: Path, tiny_build_cfg: BuildConfig,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  clips_per_recording: int | str) -> None:
    root = tmp_path / "raw"
    for site in range(6):
        for k, (label, *_) in enumerate(CORPUS):  # each site: the formats in another order
            _, seconds, rate, channels, subtype = CORPUS[(k + site) % len(CORPUS)]
            write(root / label / f"s{site}_{k}.wav", seconds, rate, channels, subtype,
                  seed=10 * site + k, loud=subtype == "FLOAT" and site % 2 == 0)
    monkeypatch.setattr(audio_io, "BLOCK_FRAMES", 5003)  # many blocks per recording
    cfg = dataclasses.replace(tiny_build_cfg, dtype="float32", on_error="fail",
                              clips_per_recording=clips_per_recording)
    build(cfg, root, tmp_path / "out", progress=False)
    n_clips = None if clips_per_recording == "all" else clips_per_recording
    rows = 0
    for split in ("train", "val", "test"):
        with open_split(tmp_path / "out" / f"{split}.h5") as reader:
            ids, mel = reader.recording_ids, reader.mel[:]
            for rid in dict.fromkeys(ids):
                clips = whole_file_clips(root / rid, cfg.features, n_clips)
                # blocked build vs whole file: log-mel sums in another order (seen: 980 of
                # 9,408 values a few ulp apart on an AVX2 CPU, at most 3.8e-6 dB)
                assert_floats_close(mel[ids == rid], clip_features(clips, cfg.features), rid)
                rows += len(clips)
    assert rows > 6 * len(CORPUS)


def test_block_wise_checks_equal_the_whole_file_checks(tmp_path: Path,
                                                       tiny_build_cfg: BuildConfig,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The signal checks fed block by block find what they find in the whole file."""
    x = 0.1 * np.random.default_rng(0).standard_normal((40000, 3)).astype(np.float32)
    x[:, 1] += 0.3                 # DC offset
    x[::50, 2] = 1.0               # 2 % clipped
    sf.write(tmp_path / "bad.wav", x, 8000, subtype="PCM_16")
    raw = (tmp_path / "bad.wav").read_bytes()
    (tmp_path / "cut.wav").write_bytes(raw[:-999])   # and a truncated copy
    monkeypatch.setattr(audio_io, "BLOCK_FRAMES", 3001)
    cfg = tiny_build_cfg
    job = RecordingJob(cfg.features, 2, cfg.min_clip_fraction, False, cfg.quality, cfg.stats)
    for name in ("bad.wav", "cut.wav"):
        result = process_recording(job, 0, tmp_path / name)
        audio = read_frames(tmp_path / name)
        expected = [*check_signal(audio.data, audio.subtype, cfg.quality),
                    *truncation(len(audio.data), audio.claimed_frames)]
        assert [(i.check, i.channel, i.reason) for i in result.issues] == \
            [(i.check, i.channel, i.reason) for i in expected]
        assert [i.value for i in result.issues] == pytest.approx([i.value for i in expected],
                                                                 rel=1e-12)
    assert {i.check for i in result.issues} == {"clipped", "dc_offset", "truncated"}


# -- memory does not grow with the length ------------------------------------------------------


def traced_peak(run: Callable[[], object]) -> int:
    """Peak bytes allocated (numpy buffers included) while ``run`` runs."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_is_flat_in_the_length(tmp_path: Path, tiny_build_cfg: BuildConfig,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4x longer recording, the same peak: build's per-recording path and predict's whole
    path (tracemalloc sees numpy and Python objects; torch's activations, bounded by the batch,
    it does not). RSS figures for 10 min to 2 h: benchmarks/perf/bench_build.py --part long."""
    monkeypatch.setattr(audio_io, "BLOCK_FRAMES", 2**14)  # 2 s at 8 kHz: short files suffice
    short = write(tmp_path / "30s.wav", 30.0, 8000, 2, "PCM_16")
    long = write(tmp_path / "2min.wav", 120.0, 8000, 2, "PCM_16", seed=1)
    cfg = tiny_build_cfg
    job = RecordingJob(cfg.features, 2, cfg.min_clip_fraction, False, cfg.quality, cfg.stats)
    detector = load_detector(_detector(tmp_path / "detector.pt"))
    runtime = make_runtime("cpu", "auto", device_key="--device")

    def build_one(path: Path) -> object:
        return process_recording(job, 0, path)

    def predict_one(path: Path) -> object:  # the whole command path: parts, scores, the row
        return predict([path], detector, tmp_path / "out.csv", runtime=runtime,
                       rules=scoring_rules(detector, tmp_path / "none.yaml"), progress=False,
                       max_batch_segments=200)

    for run in (build_one, predict_one):
        run(short)  # caches (filters, filterbank) filled before anything is measured
        peaks = [traced_peak(partial(run, path)) for path in (short, long)]
        assert peaks[1] / peaks[0] < 1.5, f"{run.__name__}: {peaks} bytes for 30 s and 2 min"
    # the control: a whole-file read grows with the file, so the measurement would see it
    whole = [traced_peak(partial(read_frames, path)) for path in (short, long)]
    assert whole[1] / whole[0] > 3.0


# -- predict: a long recording in parts gets the row of the whole-file path --------------------

MODEL = ModelConfig(widths=(4, 4, 4), dropout=0.0, pool_h=2, hidden=8)
LIMITS = BatchLimits(max_segments=16384, cpu_max_segments=1024, safety=0.5,
                     host_reserve_mb=512.0, device_reserve_mb=1024.0)


def _detector(path: Path) -> Path:
    torch.manual_seed(0)
    save_detector(path, Detector(
        model=create_model(MODEL, len(BINARY_CLASSES)).eval(), model_cfg=MODEL,
        class_names=BINARY_CLASSES, data_class_names=KNOWN_CLASSES, binary=True,
        features=SMALL_FEATURES, voting=VotingConfig(prob_mode="blend", rule="long_vote"),
        threshold=0.5, metrics={}, input_norm="none", batch_limits=LIMITS,
        min_clip_fraction=0.5))
    return path


def whole_file_row(path: Path, detector: Detector) -> dict[str, str]:
    """The row `predict` wrote before: whole-file features, scored at once, as CSV text."""
    f = detector.features
    data, rate = sf.read(path, dtype="float32", always_2d=True)
    n = math.ceil(len(data) * f.sample_rate / rate)                  # resampled length
    clips = whole_file_clips(path, f, max(1, math.ceil(n / f.clip_samples)))
    starts = np.round(np.linspace(0, max(0, n - f.clip_samples), len(clips)))
    prep = Prepared(path, clip_features(clips, f), starts / f.sample_rate, n / f.sample_rate,
                    rate / 2)
    runtime = make_runtime("cpu", "auto", device_key="--device")
    probs = score_segments(detector, detector.inference_model(), prep.mel, runtime, 1024)
    return text_row(result_row(prep, prep.starts_s, probs, detector, band_profile(prep.mel)))


def test_predict_scores_a_long_recording_in_parts_to_the_same_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    detector_path = _detector(tmp_path / "detector.pt")
    detector = load_detector(detector_path)
    long = write(tmp_path / "rec" / "a_long.wav", 100.3, 8000, 2, "PCM_16")
    failing = write(tmp_path / "rec" / "b_nan_at_end.wav", 60.0, 4096, 1, "FLOAT", seed=2)
    data, rate = sf.read(failing, dtype="float32")
    data[-10] = np.nan                      # found only once the parts before were scored
    sf.write(failing, data, rate, subtype="FLOAT")
    after = write(tmp_path / "rec" / "c_short.wav", 2.2, 8000, 1, "PCM_16", seed=3)
    parts = list(prepare(long, detector, 0.5, max_clips=7))
    assert len(parts) == 15 and [p.last for p in parts] == [False] * 14 + [True]
    monkeypatch.setattr(audio_io, "BLOCK_FRAMES", 30011)
    out = tmp_path / "out.csv"
    assert main(["predict", str(tmp_path / "rec"), "--model", str(detector_path), "--out",
                 str(out), "--no-progress", "--device", "cpu", "--batch-segments", "300"]) == 0
    rows = read_predictions(out)
    assert list(rows) == ["a_long.wav", "b_nan_at_end.wav", "c_short.wav"]
    assert rows["a_long.wav"] == whole_file_row(long, detector)
    assert rows["b_nan_at_end.wav"]["status"] == "error"
    assert "1 non-finite samples" in rows["b_nan_at_end.wav"]["notes"]
    assert rows["c_short.wav"] == whole_file_row(after, detector)
