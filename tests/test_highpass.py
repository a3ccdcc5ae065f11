"""DC removal and the high-pass before the features (``build.highpass_hz``): what it removes and
keeps, that block-wise decoding filters exactly as a whole-file read, that every feature path
(build, predict, the served model) applies it from the stored feature config, and that feature
configs stored before the key existed still load, as off."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from scipy.signal import butter, sosfilt

import leakpipe.audio.io as audio_io
from leakpipe.audio.clips import AudioError
from leakpipe.audio.highpass import ORDER, HighPass, highpass, level_frames
from leakpipe.audio.io import load_clips
from leakpipe.audio.opening import waveform_source
from leakpipe.cli import main
from leakpipe.config import ConfigError, FeatureConfig, load_section, stored_features
from leakpipe.constants import ATTR_FEATURES, BINARY_CLASSES, KNOWN_CLASSES
from leakpipe.data.reader import open_split
from leakpipe.data.schema import decode_json, encode_json
from leakpipe.decision.voting import VotingConfig
from leakpipe.detector import Detector, load_detector, save_detector
from leakpipe.features.mel import clip_features
from leakpipe.files import save_torch_atomic
from leakpipe.model import create_model
from leakpipe.predict.inputs import prepare
from tests.conftest import PARAMS
from tests.helpers_close import assert_floats_close
from tests.helpers_detector import LIMITS, SMALL_MODEL, one_torch_thread, restore_logging
from tests.helpers_h5 import SMALL_FEATURES, write_split
from tests.helpers_predict import read_predictions

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)

ON = dataclasses.replace(SMALL_FEATURES, highpass_hz=20.0)     # 4096 Hz, 16 bands to 2048 Hz
RATE = ON.sample_rate


def noise(seconds: float, rate: int = RATE, seed: int = 0, rms: float = 0.05) -> np.ndarray:
    return (rms * np.random.default_rng(seed).standard_normal(int(seconds * rate))
            ).astype(np.float32)


def features_of(x: np.ndarray, f: FeatureConfig, rate: int = RATE) -> np.ndarray:
    """(clips, L, S, M, T) of a waveform in memory, through the path build and predict take."""
    source = waveform_source("x", x, rate)
    return next(prepare(source, _detector_like(f), 0.5, 10**6)).mel


def _detector_like(f: FeatureConfig):  # prepare only reads the feature config
    return type("D", (), {"features": f})()


# -- what the filter removes and keeps -----------------------------------------------------------

def test_a_dc_offset_leaves_the_log_mel_when_on_and_fills_the_lowest_band_when_off() -> None:
    x = noise(3.0)
    offset = x + np.float32(0.4)                 # |mean| / RMS = 8: far past dc_offset_max
    on, on_dc = features_of(x, ON), features_of(offset, ON)
    np.testing.assert_allclose(on_dc, on, atol=0.05)           # dB, every band and segment
    off, off_dc = features_of(x, SMALL_FEATURES), features_of(offset, SMALL_FEATURES)
    lowest = (off_dc - off)[..., 0, :]                         # band 0: DC and 0-128 Hz
    assert float(lowest.min()) > 10.0 and float(lowest.mean()) > 15.0   # the offset rules it
    np.testing.assert_allclose(off_dc[..., 3:, :], off[..., 3:, :], atol=0.05)   # not the rest


def test_a_1_khz_tone_passes_unchanged_and_a_5_hz_swell_is_removed() -> None:
    t = np.arange(4 * RATE) / RATE
    tone = (0.3 * np.sin(2 * np.pi * 1000.0 * t)).astype(np.float32)
    y = highpass(tone, 20.0, RATE)
    steady = slice(RATE // 2, None)                            # after the filter has settled
    assert math.isclose(float(np.std(y[steady])), float(np.std(tone[steady])), rel_tol=1e-4)
    on, off = features_of(tone, ON), features_of(tone, SMALL_FEATURES)
    band = int(np.argmax(off.mean(axis=(0, 1, 2, 4))))        # the tone's band
    assert abs(float((on - off)[..., band, :].mean())) < 0.01  # dB
    swell = (0.3 * np.sin(2 * np.pi * 5.0 * t)).astype(np.float32)
    gone = highpass(swell, 20.0, RATE)[steady]
    assert np.std(gone) < 0.3 / np.sqrt(2) * 10 ** (-ORDER * 12 / 20 + 0.1)   # ~48 dB down


def test_the_level_is_the_mean_of_the_first_tenth_of_a_second() -> None:
    """A constant recording comes out as zeros at once: the filter starts settled."""
    y = highpass(np.full(RATE, 0.5, np.float32), 20.0, RATE)
    assert float(np.abs(y).max()) < 1e-6
    assert level_frames(RATE, 10**6) == math.ceil(0.1 * RATE) and level_frames(RATE, 5) == 5


@pytest.mark.parametrize("block", [1, 7, 409, 410, 411, 5000, 10**6])
def test_block_wise_filtering_equals_the_whole_recording(block: int) -> None:
    x = noise(2.0, 44100, rms=0.2) + np.float32(0.3)
    whole = highpass(x, 20.0, 44100)
    hp = HighPass(20.0, 44100, len(x))
    parts = [hp(x[a:a + block]) for a in range(0, len(x), block)] + [hp.flush()]
    # the same recursion sample by sample, but the per-block state hand-over and any
    # vectorised kernel may round differently: within float32 rounding of the peak
    assert_floats_close(np.concatenate(parts), whole, f"block {block}")
    sos = butter(ORDER, 20.0, btype="highpass", fs=44100, output="sos")  # the design, checked
    level = np.mean(x[:level_frames(44100, len(x))], dtype=np.float64)
    np.testing.assert_allclose(whole, sosfilt(sos, x.astype(np.float64) - level), atol=1e-6)


@pytest.mark.parametrize("rate, block", [(44100, 3001), (4096, 300), (8000, 10**6)])
def test_clips_decoded_block_by_block_equal_the_whole_file_filtered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rate: int, block: int) -> None:
    """The reference: the whole file read, high-passed at its rate, resampled, cut (as in
    tests/test_long_recordings.py); the streamed clips equal it within float32 rounding
    (the two paths filter and resample in differently sized pieces)."""
    from tests.test_long_recordings import whole_file_clips
    x = noise(7.3, rate, rms=0.2) + np.float32(0.2)
    sf.write(tmp_path / "dc.wav", x, rate, subtype="PCM_16")
    monkeypatch.setattr(audio_io, "BLOCK_FRAMES", block)
    clips = load_clips(tmp_path / "dc.wav", ON, None, 0.5)
    expected = whole_file_clips(tmp_path / "dc.wav", ON, None)
    # a long resampling filter's sums taken in another order, as in test_long_recordings:
    # 1e-5 of the peak; a sample shifted at a block edge moves a noise clip by about the peak
    np.testing.assert_allclose(clips, expected, rtol=0, atol=1e-5 * float(np.abs(expected).max()))


def test_a_rate_too_low_for_the_cut_off_is_an_audio_error(tmp_path: Path) -> None:
    sf.write(tmp_path / "slow.wav", noise(30.0, 30), 30, subtype="FLOAT")
    with pytest.raises(AudioError, match=r"slow.wav: sample rate 30 Hz is too low .*highpass_hz"):
        load_clips(tmp_path / "slow.wav", dataclasses.replace(ON, clip_s=1.0), 1, 0.5)


# -- predict and the served model apply it from the detector's feature config -----------------

def _save(path: Path, features: FeatureConfig) -> Path:
    torch.manual_seed(0)
    model = create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval()
    save_detector(path, Detector(
        model=model, model_cfg=SMALL_MODEL, class_names=BINARY_CLASSES,
        data_class_names=KNOWN_CLASSES, binary=True, features=features,
        voting=VotingConfig(prob_mode="blend", rule="long_vote"), threshold=0.5, metrics={},
        input_norm="none", batch_limits=LIMITS, min_clip_fraction=0.5))
    return path


def _predict_rows(tmp_path: Path, detector: Path, *wavs: Path) -> dict[str, dict[str, str]]:
    out = tmp_path / f"{detector.stem}.csv"
    assert main(["predict", *map(str, wavs), "--model", str(detector), "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    return read_predictions(out)


def test_predict_on_a_dc_offset_wav_agrees_with_the_same_wav_without_it(tmp_path: Path) -> None:
    x = noise(2.5, 8000, rms=0.1)
    sf.write(tmp_path / "clean.wav", x, 8000, subtype="FLOAT")
    sf.write(tmp_path / "offset.wav", x + np.float32(0.3), 8000, subtype="FLOAT")
    rows = _predict_rows(tmp_path, _save(tmp_path / "on.pt", ON), tmp_path / "clean.wav",
                         tmp_path / "offset.wav")
    clean, offset = rows["clean.wav"], rows["offset.wav"]
    assert clean["status"] == offset["status"] == "ok"
    assert abs(float(clean["leak_prob"]) - float(offset["leak_prob"])) <= 2e-4
    np.testing.assert_allclose(np.array(offset["long_probs"].split(), dtype=float),
                               np.array(clean["long_probs"].split(), dtype=float), atol=2e-4)
    assert load_detector(tmp_path / "on.pt").features.highpass_hz == 20.0
    off = _predict_rows(tmp_path, _save(tmp_path / "off.pt", SMALL_FEATURES),
                        tmp_path / "clean.wav", tmp_path / "offset.wav")
    assert off["clean.wav"]["long_probs"] != off["offset.wav"]["long_probs"]   # it did matter


def test_served_waveforms_are_filtered_like_files(tmp_path: Path) -> None:
    """The served model's path (waveform_source) and a file's give the same features."""
    x = noise(2.0, 8000, rms=0.1) + np.float32(0.25)
    sf.write(tmp_path / "a.wav", x, 8000, subtype="FLOAT")
    detector = _detector_like(ON)
    from_file = next(prepare(tmp_path / "a.wav", detector, 0.5, 100)).mel
    served = next(prepare(waveform_source("a", x, 8000), detector, 0.5, 100)).mel
    # three paths (served array, file stream, build's clip cut): log-mel within float32
    # rounding of the largest magnitude, since each may hand the FFT differently laid-out blocks
    assert_floats_close(served, from_file, "served vs file")
    assert_floats_close(from_file, clip_features(
        load_clips(tmp_path / "a.wav", ON, from_file.shape[0], 0.5), ON), "file vs build")


# -- the parameter and stored feature configs --------------------------------------------------

def test_params_hold_the_key_on_by_default_and_validate_it(tmp_path: Path) -> None:
    build = load_section(PARAMS, "build")
    assert build.highpass_hz == 20.0 and build.features.highpass_hz == 20.0
    raw = yaml.safe_load(PARAMS.read_text())
    for bad, message in [(-1.0, "must be >= 0"), (float("nan"), "must be a finite number"),
                         (float("inf"), "must be a finite number"),
                         (4096.0, "below the Nyquist frequency 4096")]:
        raw["build"]["highpass_hz"] = bad
        path = tmp_path / "params.yaml"
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(ConfigError, match=rf"build\.highpass_hz: .*{message}") as err:
            load_section(path, "build")
        assert "\n" not in str(err.value)
    del raw["build"]["highpass_hz"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"build\.highpass_hz: missing key"):
        load_section(path, "build")               # params stay strict: only files default


def test_feature_configs_stored_without_the_key_load_as_off(tmp_path: Path) -> None:
    old = SMALL_FEATURES.to_dict()
    assert "highpass_hz" not in old                           # off: stored as before the key
    assert stored_features(old, "features").highpass_hz == 0.0
    assert ON.to_dict()["highpass_hz"] == 20.0 and stored_features(ON.to_dict(), "f") == ON
    with pytest.raises(ConfigError, match=r"features\.highpass_hz: must be >= 0"):
        stored_features({**old, "highpass_hz": -5.0}, "features")
    # an HDF5 split written before the key
    split = write_split(tmp_path / "train.h5", "train", features=ON)
    with h5py.File(split, "r+") as h5:
        raw = decode_json(h5.attrs[ATTR_FEATURES], ATTR_FEATURES)
        assert raw.pop("highpass_hz") == 20.0
        h5.attrs[ATTR_FEATURES] = encode_json(raw)
    with open_split(split) as reader:
        assert reader.features == SMALL_FEATURES
    # a detector file written before the key
    detector = _save(tmp_path / "new.pt", ON)
    raw = torch.load(detector, weights_only=True)
    raw["features"] = {k: v for k, v in raw["features"].items() if k != "highpass_hz"}
    save_torch_atomic(raw, tmp_path / "old.pt")
    assert load_detector(tmp_path / "old.pt").features == SMALL_FEATURES
