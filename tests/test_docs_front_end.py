"""A device's front end written from docs/export.md alone reproduces predict's leak_prob.

Everything below the ``# -- from the docs`` line uses only what docs/export.md states, numpy,
scipy, soundfile, librosa's mel filterbank and onnxruntime on the exported files, no leakpipe
code: a recording read, high-passed, cut into clips and segments, turned into log-mel, scored
by ``model.onnx``, voted and calibrated (the `cnn` kind); a recording's levels and statistics
measured and scored by the `logger_stats` graph. Each must give the ``leak_prob`` leakpipe's
own path gives within 1e-6, and the rounded value in predict's CSV. A step the docs leave out
or get wrong shows here (as the statistics' window and the high-pass's DC removal once did, off
by 1e-4). Real tiny detectors and real WAV files.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import librosa
import numpy as np
import onnxruntime as ort
import pytest
import scipy.signal
import soundfile as sf

from leakpipe.audio.io import load_clips
from leakpipe.audio.opening import open_audio
from leakpipe.cli import main
from leakpipe.decision.calibration import Calibration
from leakpipe.decision.voting import file_scores
from leakpipe.detector import load_detector, save_detector
from leakpipe.features.mel import clip_features
from leakpipe.predict.scoring import score_segments
from leakpipe.runtime import make_runtime
from leakpipe.stats_detector import measure, save_stats_detector
from tests.helpers_detector import one_torch_thread
from tests.test_export import detector_file
from tests.test_fused_detector import _stats_detector

_one_thread = pytest.fixture(autouse=True)(one_torch_thread)
TOLERANCE = 1e-6          # on leak_prob: float rounding, nothing the docs left out
PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


def _recording(path: Path, rate: int, seconds: float, seed: int) -> Path:
    """A stereo 16-bit WAV: hiss with a DC offset and a hum (the high-pass has work to do)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    left = 0.05 * rng.standard_normal(t.size) + 0.2 + 0.1 * np.sin(2 * np.pi * 7.0 * t)
    right = 0.08 * rng.standard_normal(t.size) + 0.1
    sf.write(path, np.stack([left, right], axis=1), rate, subtype="PCM_16")
    return path


def _cnn_detector(tmp_path: Path) -> Path:
    """A random-weight CNN detector with a high-pass and a fitted (non-identity) calibration."""
    path = detector_file(tmp_path / "cnn.pt", threshold=0.45)
    det = load_detector(path)
    det = dataclasses.replace(det, features=dataclasses.replace(det.features, highpass_hz=20.0),
                              calibration=Calibration(method="platt", slope=1.7,
                                                      intercept=-0.4, fitted_on=10, note=""))
    save_detector(path, det)
    return path


def _leakpipe_cnn_prob(detector_path: Path, wav: Path) -> float:
    """leakpipe's own path, unrounded: read and cut, log-mel, score, vote, calibrate."""
    det = load_detector(detector_path)
    n_clips = max(1, math.ceil(sf.info(wav).frames / det.features.clip_samples))  # predict's
    clips = load_clips(wav, det.features, n_clips, det.min_clip_fraction or 0.5)
    seg = score_segments(det, det.inference_model(), clip_features(clips, det.features),
                         make_runtime("cpu"), 4096)
    flat = seg.reshape(1, -1, seg.shape[-1])                 # all long segments of all clips
    score = float(file_scores(flat, det.voting.rule, det.voting.vote_fraction)[0])
    return float(det.calibration.prob(score))


def _predicted(tmp_path: Path, model: Path, wav: Path) -> dict[str, str]:
    out = tmp_path / f"{wav.stem}_predicted.csv"
    assert main(["predict", str(wav), "--model", str(model), "--out", str(out),
                 "--params", str(PARAMS), "--no-progress"]) == 0
    with out.open(newline="") as f:
        (row,) = csv.DictReader(f)
    return row


# -- from the docs ------------------------------------------------------------------------------

def docs_read(path: Path, highpass_hz: float) -> tuple[np.ndarray, int]:
    """Step 1: mono (channels averaged), full scale 1; DC of the first 0.1 s removed and a
    causal 4th-order Butterworth high-pass (sos, float64, zero initial state)."""
    data, rate = sf.read(path, dtype="float32", always_2d=True)
    x = data.mean(axis=1).astype(np.float64)
    if highpass_hz > 0:
        x = x - x[:math.ceil(0.1 * rate)].mean()
        sos = scipy.signal.butter(4, highpass_hz, "highpass", fs=rate, output="sos")
        x = scipy.signal.sosfilt(sos, x)
    return x, rate


def docs_cnn_prob(edge: Path, wav: Path) -> float:
    """Steps 1-8 of "Deciding a recording on the device" for a `cnn` export."""
    rules = json.loads((edge / "rules.json").read_text())
    f = rules["features"]
    x, rate = docs_read(wav, f["highpass_hz"])
    assert rate == f["sample_rate"]                      # step 1's resampling: not needed here
    clip = round(f["clip_s"] * rate)
    n_clips = math.ceil(len(x) / clip)                   # step 2: evenly spaced clips
    starts = np.round(np.linspace(0, max(0, len(x) - clip), n_clips)).astype(int)
    x = np.pad(x, (0, max(0, clip - len(x))))
    long_w, long_h = round(f["long_window_s"] * rate), round(f["long_hop_s"] * rate)
    window = scipy.signal.get_window("hann", f["n_fft"], fftbins=True)   # periodic Hann
    bank = librosa.filters.mel(sr=rate, n_fft=f["n_fft"], n_mels=f["n_mels"], fmin=f["fmin"],
                               fmax=f["fmax"])
    clips = []
    for s in starts:                                    # step 3 and 4
        c = x[s:s + clip]
        longs = [c[a:a + long_w] for a in range(0, clip - long_w + 1, long_h)]
        segs = [[seg[b:b + f["short_window"]] for b in
                 range(0, long_w - f["short_window"] + 1, f["short_hop"])] for seg in longs]
        frames = np.array([[[s2[k:k + f["n_fft"]] for k in
                             range(0, f["short_window"] - f["n_fft"] + 1, f["hop_length"])]
                            for s2 in row] for row in segs])                   # (L, S, T, n_fft)
        power = np.abs(np.fft.rfft(frames * window, axis=-1)) ** f["power"]
        mel = power @ bank.T                                                    # (L, S, T, M)
        db = (20 / f["power"]) * np.log10(np.maximum(mel, f["log_floor"]))
        clips.append(np.swapaxes(db, -1, -2))                                   # (L, S, M, T)
    mel = np.array(clips)
    if rules["input_norm"] == "clip_level":                                    # step 5
        mel = mel - mel.mean(axis=(1, 2, 3, 4), keepdims=True)
    elif rules["input_norm"] == "clip_band":
        mel = mel - mel.mean(axis=(1, 2, 4), keepdims=True)
    n_long, n_short, n_mels, n_frames = rules["segment_shape"]
    session = ort.InferenceSession(str(edge / "model.onnx"), providers=["CPUExecutionProvider"])
    probs = session.run(None, {"segments": mel.reshape(-1, 1, n_mels, n_frames)
                               .astype(np.float32)})[0]                        # step 6
    long_probs = probs[:, rules["onnx"]["leak_column"]].astype(np.float64).reshape(
        -1, n_short).mean(axis=1)                      # step 7: every long segment together
    assert rules["voting"]["rule"] == "long_vote"
    k = math.ceil(rules["voting"]["vote_fraction"] * len(long_probs) - 1e-9)
    score = float(np.sort(long_probs)[::-1][max(k, 1) - 1])   # LEAK iff score >= threshold
    cal = rules["calibration"]                                                 # step 8
    if cal["method"] == "identity":
        return score
    z = cal["slope"] * math.log(score / (1 - score)) + cal["intercept"]
    return 1 / (1 + math.exp(-z))


def docs_statistics(wav: Path, config: dict, names: list[str]) -> dict[str, float]:
    """A `logger_stats` recording's statistics as "A `logger_stats` detector" describes them."""
    data, rate = sf.read(wav, dtype="float64", always_2d=True)
    x = data.mean(axis=1)
    n = max(16, round(config["frame_s"] * rate))
    frames = x[:len(x) // n * n].reshape(-1, n) if len(x) >= n else np.pad(x, (0, n - len(x)))[None]
    frames = frames - frames.mean(axis=1, keepdims=True)
    window = np.hanning(n + 2)[1:-1]
    spec = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2 * 2 / (n * np.sum(window ** 2))
    freqs = np.fft.rfftfreq(n, 1 / rate)
    floor = 10 ** (config["floor_db"] / 10)
    levels, present = {}, {}
    centres = config["band_centres_hz"]
    for c in centres:
        lo, hi = c / 2 ** 0.5, c * 2 ** 0.5
        present[c] = hi <= rate / 2
        band = (freqs >= lo) & (freqs < hi)
        levels[c] = 10 * np.log10(np.maximum(spec[:, band].sum(axis=1), floor))
    overall = (freqs >= min(centres) / 2 ** 0.5) & (freqs > 0)
    levels["level"] = 10 * np.log10(np.maximum(spec[:, overall].sum(axis=1), floor))
    out = {}
    median_overall = np.median(levels["level"])
    for key, lv in levels.items():
        label = "level" if key == "level" else f"band{key:g}"
        if key != "level" and not present[key]:
            continue
        for q in config["percentiles"]:
            out[f"{label}_p{q:g}"] = float(np.percentile(lv, q))
        out[f"{label}_spread"] = float(np.percentile(lv, 90) - np.percentile(lv, 10))
        out[f"{label}_std"] = float(lv.std())
        if key != "level":
            out[f"{label}_rel"] = float(np.median(lv) - median_overall)
    return {name: out.get(name, math.nan) for name in names}


def docs_stats_prob(edge: Path, wav: Path) -> float:
    rules = json.loads((edge / "rules.json").read_text())
    stats = docs_statistics(wav, rules["statistics_config"], rules["all_statistics"])
    row = np.array([[stats[name] for name in rules["statistics"]]], dtype=np.float32)
    session = ort.InferenceSession(str(edge / "model.onnx"), providers=["CPUExecutionProvider"])
    score = float(session.run(None, {session.get_inputs()[0].name: row})[0].ravel()[0])
    cal = rules["calibration"]
    if cal["method"] == "identity":
        return score
    z = cal["slope"] * math.log(score / (1 - score)) + cal["intercept"]
    return 1 / (1 + math.exp(-z))


# -- the checks ---------------------------------------------------------------------------------

def test_a_cnn_front_end_from_the_docs_gives_predicts_leak_prob(tmp_path: Path) -> None:
    model = _cnn_detector(tmp_path)
    edge = tmp_path / "edge"
    assert main(["export", "--model", str(model), "--out", str(edge)]) == 0
    rate = load_detector(model).features.sample_rate
    for seed, seconds in ((1, 2.6), (2, 0.8)):            # several clips; one padded clip
        wav = _recording(tmp_path / f"rec{seed}.wav", rate, seconds, seed)
        ours = _leakpipe_cnn_prob(model, wav)
        theirs = docs_cnn_prob(edge, wav)
        assert abs(theirs - ours) <= TOLERANCE, (seed, theirs, ours)
        assert float(_predicted(tmp_path, model, wav)["leak_prob"]) == pytest.approx(
            ours, abs=5e-5)                                # predict's CSV: 4 decimals


def test_a_logger_stats_front_end_from_the_docs_gives_predicts_leak_prob(tmp_path: Path) -> None:
    detector, _ = _stats_detector()
    model = tmp_path / "stats.pt"
    save_stats_detector(model, detector)
    edge = tmp_path / "edge"
    assert main(["export", "--model", str(model), "--out", str(edge)]) == 0
    for seed, rate in ((3, 8000), (4, 2000)):          # 2000 Hz: the 1 kHz band is missing
        wav = _recording(tmp_path / f"rec{seed}.wav", rate, 3.3, seed)
        stats = measure(open_audio(wav), detector).stats
        ours = detector.leak_prob(float(detector.probability(stats[None, :])[0]))
        theirs = docs_stats_prob(edge, wav)
        assert abs(theirs - ours) <= TOLERANCE, (seed, theirs, ours)
        assert float(_predicted(tmp_path, model, wav)["leak_prob"]) == pytest.approx(
            ours, abs=5e-5)
