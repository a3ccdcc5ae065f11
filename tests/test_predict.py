"""`leakpipe predict` on generated recordings of several formats, unreadable files, resume, and
its two CSVs (a short row per recording; the timeline beside it, in time order with its clip)."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from leakpipe import tracking
from leakpipe.audio.io import load_clips
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.constants import BINARY_CLASSES
from leakpipe.data.input_norm import normalize_clips
from leakpipe.decision.voting import file_scores, segment_leak_prob
from leakpipe.detector import load_detector
from leakpipe.errors import DataError
from leakpipe.features.mel import clip_features
from leakpipe.files import save_torch_atomic
from leakpipe.model import create_model
from leakpipe.predict.rows import CSV_COLUMNS, TIMELINE_COLUMNS, timeline_path
from leakpipe.predict.rules import scoring_rules
from leakpipe.serve.model import log_served_detector
from tests.conftest import PARAMS
from tests.helpers_detector import (
    LIMITS,
    SMALL_MODEL,
    copied_store,
    one_torch_thread,
    restore_logging,
    save_small_detector,
)
from tests.helpers_h5 import SMALL_FEATURES
from tests.helpers_predict import read_predictions

RATE = SMALL_FEATURES.sample_rate          # 4096 Hz, 1 s clips, 7 long segments per clip
# (name, seconds, sample rate, channels, subtype)
FORMATS = [
    ("pcm16.wav", 1.0, RATE, 1, "PCM_16"),
    ("pcm24_stereo.wav", 2.5, 8000, 2, "PCM_24"),
    ("float.wav", 1.5, 44100, 1, "FLOAT"),
    ("u8.wav", 1.0, 11025, 1, "PCM_U8"),
    ("deep/nested.flac", 3.0, RATE, 1, "PCM_16"),
    ("short.wav", 0.75, RATE, 1, "PCM_16"),
]

_keep_logging = pytest.fixture(autouse=True)(restore_logging)


_one_thread = pytest.fixture(autouse=True)(one_torch_thread)


@pytest.fixture
def detector_path(tmp_path: Path) -> Path:
    """A random-weight binary detector on the small feature config, long_vote at 0.5."""
    torch.manual_seed(0)
    model = create_model(SMALL_MODEL, len(BINARY_CLASSES))
    path = tmp_path / "detector.pt"
    return save_small_detector(path, model.eval(), "none")


@pytest.fixture
def recordings(tmp_path: Path) -> Path:
    root = tmp_path / "recordings"
    rng = np.random.default_rng(0)
    for name, seconds, rate, channels, subtype in FORMATS:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        signal = 0.3 * rng.standard_normal((int(seconds * rate), channels))
        sf.write(root / name, signal.astype(np.float32), rate, subtype=subtype)
    (root / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    (root / "notes.txt").write_text("not audio, not picked up from a folder")
    return root


def _rows(path: Path) -> dict[str, dict[str, str]]:
    return read_predictions(path)


def _predict(*args: str | Path) -> int:
    return main(["predict", *map(str, args), "--no-progress", "--device", "cpu"])


def test_every_format_gets_a_row_and_unreadable_files_a_note(tmp_path: Path, recordings: Path,
                                                              detector_path: Path) -> None:
    out = tmp_path / "out.csv"
    assert _predict(recordings, "--model", detector_path, "--out", out) == 0
    rows = _rows(out)
    assert set(rows) == {Path(name).name for name, *_ in FORMATS} | {"broken.wav"}
    for name, seconds, *_ in FORMATS:
        row = rows[Path(name).name]
        assert row["status"] == "ok", row["notes"]
        clips = max(1, int(np.ceil(seconds - 1e-9)))            # 1 s clips cover the recording
        assert int(row["n_long"]) == 7 * clips == len(row["long_probs"].split())
        assert row["decision"] in ("LEAK", "NOLEAK")
        assert (row["rule"], float(row["threshold"])) == ("long_vote", 0.5)
        probs = np.array(row["long_probs"].split(), dtype=float)
        over = float(row["frac_long_over"])
        assert over == pytest.approx((probs >= 0.5).mean(), abs=1e-3)
        starts = np.array(row["long_starts_s"].split(), dtype=float)
        assert starts[0] == 0 and starts[-1] == pytest.approx(max(seconds, 1.0) - 0.25, abs=1e-3)
    assert "zero-padded" in rows["short.wav"]["notes"]
    broken = rows["broken.wav"]
    assert broken["status"] == "error" and broken["leak_prob"] == ""
    assert "broken.wav" in broken["notes"]


def test_probabilities_match_the_features_build_computes(tmp_path: Path, recordings: Path,
                                                         detector_path: Path) -> None:
    """One clip long: predict's probability equals the model on build's features."""
    out = tmp_path / "out.csv"
    assert _predict(recordings / "pcm16.wav", "--model", detector_path, "--out", out) == 0
    detector = load_detector(detector_path)
    clips = load_clips(recordings / "pcm16.wav", SMALL_FEATURES, 1, 0.5)
    mel = torch.from_numpy(clip_features(clips, SMALL_FEATURES)).reshape(-1, 1, 16, 1)
    with torch.inference_mode():
        probs = segment_leak_prob(*detector.model(mel), detector.leak_index, "blend")
    expected = file_scores(probs.numpy().reshape(1, 7, 7), "long_vote", 0.5)[0]
    assert float(_rows(out)["pcm16.wav"]["leak_prob"]) == pytest.approx(expected, abs=1e-4)


def test_rows_say_whether_the_recording_covers_the_models_band(tmp_path: Path,
                                                               detector_path: Path) -> None:
    """``band_hz`` is the recording's own Nyquist frequency, ``band_limited`` whether it lies
    below the model's fmax (2048 Hz here): the bands above it see only the resampler."""
    rng = np.random.default_rng(0)
    for name, rate in [("narrow.wav", 2000), ("model.wav", RATE), ("wide.wav", 44100)]:
        signal = 0.1 * rng.standard_normal(int(1.5 * rate)).astype(np.float32)
        sf.write(tmp_path / name, signal, rate, subtype="FLOAT")
    (tmp_path / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    out = tmp_path / "out.csv"
    assert _predict(tmp_path, "--model", detector_path, "--out", out) == 0
    rows = _rows(out)
    assert {name: (row["band_hz"], row["band_limited"]) for name, row in rows.items()} == {
        "narrow.wav": ("1000.0", "True"), "model.wav": ("2048.0", "False"),
        "wide.wav": ("22050.0", "False"), "broken.wav": ("", "")}


def test_resume_skips_done_recordings_and_redoes_a_cut_line(tmp_path: Path, recordings: Path,
                                                            detector_path: Path) -> None:
    out = tmp_path / "out.csv"
    first = [recordings / "pcm16.wav", recordings / "float.wav", recordings / "u8.wav"]
    assert _predict(*first, "--model", detector_path, "--out", out) == 0
    lines = out.read_text().splitlines(keepends=True)
    kept = _rows(out)
    out.write_text("".join(lines[:-1]) + lines[-1][:25])      # a crash cut the last line
    everything = [*first, recordings / "short.wav"]
    assert _predict(*everything, "--model", detector_path, "--out", out, "--resume") == 0
    rows = _rows(out)
    names = [Path(line.split(",")[0]).name for line in out.read_text().splitlines()[1:]]
    assert sorted(names) == sorted(p.name for p in everything)   # each recording once
    assert rows["pcm16.wav"] == kept["pcm16.wav"] and rows["u8.wav"] == kept["u8.wav"]
    assert rows["float.wav"]["long_probs"] == kept["float.wav"]["long_probs"]    # redone whole


def test_resume_redoes_a_recording_whose_timeline_is_incomplete(
        tmp_path: Path, recordings: Path, detector_path: Path) -> None:
    """The timeline is written before its rows; a timeline file cut short since (or lost)
    makes exactly the recordings it misses run again, each segment still once."""
    out = tmp_path / "out.csv"
    first = [recordings / "pcm16.wav", recordings / "float.wav"]
    assert _predict(*first, "--model", detector_path, "--out", out) == 0
    kept = _rows(out)
    timeline = timeline_path(out)
    lines = timeline.read_text().splitlines(keepends=True)
    timeline.write_text("".join(lines[:-3]))                   # float.wav's last segments lost
    assert _predict(*first, "--model", detector_path, "--out", out, "--resume") == 0
    assert _rows(out) == kept
    timeline.unlink()
    assert _predict(*first, "--model", detector_path, "--out", out, "--resume") == 0
    assert _rows(out) == kept


def test_the_csv_is_one_short_line_per_recording_and_the_timeline_is_in_time_order(
        tmp_path: Path, recordings: Path, detector_path: Path) -> None:
    """2.5 s at 1 s clips: three overlapping clips starting at 0, 0.75 and 1.5 s. The
    timeline runs forward in time, each long segment with its clip (one instant twice where
    clips overlap), and the per-recording CSV carries no list of numbers."""
    out = tmp_path / "out.csv"
    assert _predict(recordings / "pcm24_stereo.wav", "--model", detector_path, "--out",
                    out) == 0
    header, line = out.read_text().splitlines()
    assert tuple(header.split(",")) == CSV_COLUMNS and len(line) < 300
    with timeline_path(out).open(newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == TIMELINE_COLUMNS
        segments = list(reader)
    assert timeline_path(out).name == "out_timeline.csv" and len(segments) == 3 * 7
    starts = [float(s["start_s"]) for s in segments]
    assert starts == sorted(starts) and starts[0] == 0.0 and starts[-1] == 2.25
    for clip, clip_start in enumerate((0.0, 0.75, 1.5)):      # each clip: 7 segments 0.125 s apart
        own = [float(s["start_s"]) for s in segments if s["clip"] == str(clip)]
        assert own == pytest.approx([clip_start + 0.125 * k for k in range(7)])
    assert [s["clip"] for s in segments if float(s["start_s"]) == 0.75] == ["0", "1"]


def test_resume_refuses_a_foreign_csv(tmp_path: Path, recordings: Path, detector_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.csv"
    out.write_text("a,b\n1,2\n")
    assert _predict(recordings, "--model", detector_path, "--out", out, "--resume") == 3
    assert "has no out_detector.json beside it" in capsys.readouterr().err   # no record
    assert out.read_text() == "a,b\n1,2\n"


def test_small_batches_give_the_same_rows(tmp_path: Path, recordings: Path,
                                          detector_path: Path) -> None:
    big, small = tmp_path / "big.csv", tmp_path / "small.csv"
    assert _predict(recordings, "--model", detector_path, "--out", big) == 0
    assert _predict(recordings, "--model", detector_path, "--out", small,
                    "--batch-segments", "5") == 0
    assert _rows(small) == _rows(big)


def test_model_loads_from_an_mlflow_uri(tmp_path: Path, recordings: Path, detector_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    with tracking.start_run("evaluate"):
        uri = log_served_detector(detector_path)
    assert uri.startswith("models:/")
    by_file, by_uri = tmp_path / "file.csv", tmp_path / "uri.csv"
    assert _predict(recordings / "pcm16.wav", "--model", detector_path, "--out", by_file) == 0
    assert _predict(recordings / "pcm16.wav", "--model", uri, "--out", by_uri) == 0
    assert _rows(by_uri) == _rows(by_file)
    assert _predict(recordings, "--model", "models:/m-doesnotexist", "--out", by_uri) == 3


def _detector(path: Path, input_norm: str) -> Path:
    torch.manual_seed(0)
    model = create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval()
    return save_small_detector(path, model, input_norm)


def test_detector_carries_input_norm_and_version_1_files_mean_none(tmp_path: Path) -> None:
    path = _detector(tmp_path / "band.pt", "clip_band")
    assert load_detector(path).input_norm == "clip_band"
    raw = torch.load(path, weights_only=True)
    del raw["input_norm"]
    save_torch_atomic({**raw, "version": 1}, tmp_path / "v1.pt")       # written before the field
    assert load_detector(tmp_path / "v1.pt").input_norm == "none"
    save_torch_atomic({**raw, "input_norm": "pcen"}, tmp_path / "bad.pt")
    with pytest.raises(DataError, match="input_norm 'pcen'"):
        load_detector(tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="input_norm 'pcen'"):
        _detector(tmp_path / "never.pt", "pcen")


@pytest.mark.parametrize("input_norm", ["none", "clip_level", "clip_band"])
def test_predict_normalises_each_clip_as_the_detector_says(tmp_path: Path,
                                                           input_norm: str) -> None:
    """The model sees normalize_clips(build's features); a +20 dB gain then changes nothing."""
    detector_path = _detector(tmp_path / "detector.pt", input_norm)
    signal = 0.01 * np.random.default_rng(1).standard_normal(2 * RATE).astype(np.float32)
    sf.write(tmp_path / "quiet.wav", signal, RATE, subtype="FLOAT")
    sf.write(tmp_path / "loud.wav", 10 * signal, RATE, subtype="FLOAT")
    out = tmp_path / "out.csv"
    assert _predict(tmp_path / "quiet.wav", tmp_path / "loud.wav", "--model", detector_path,
                    "--out", out) == 0
    rows = _rows(out)
    detector = load_detector(detector_path)
    clips = load_clips(tmp_path / "quiet.wav", SMALL_FEATURES, 2, 0.5)
    mel = normalize_clips(torch.from_numpy(clip_features(clips, SMALL_FEATURES)), input_norm)
    with torch.inference_mode():
        probs = segment_leak_prob(*detector.model(mel.reshape(-1, 1, 16, 1)),
                                  detector.leak_index, "blend")
    long_probs = probs.numpy().reshape(2, 7, 7).mean(axis=2).reshape(-1)   # (clips * L,)
    quiet = np.array(rows["quiet.wav"]["long_probs"].split(), dtype=float)
    loud = np.array(rows["loud.wav"]["long_probs"].split(), dtype=float)
    np.testing.assert_allclose(quiet, long_probs, atol=1e-4)
    if input_norm == "none":
        assert np.abs(loud - quiet).max() > 1e-3
    else:
        np.testing.assert_allclose(loud, quiet, atol=2e-4)


def test_scoring_rules_come_from_the_detector_or_else_from_params(tmp_path: Path) -> None:
    """evaluate stores the batch caps and the shortest usable recording in the detector;
    a detector written before that takes them from params.yaml, and without one says so."""
    torch.manual_seed(0)
    model = create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval()
    own = load_detector(save_small_detector(tmp_path / "own.pt", model, "none",
                              dataclasses.replace(LIMITS, cpu_max_segments=7), 0.9))
    rules = scoring_rules(own, tmp_path / "absent.yaml")
    assert rules.limits.cap(torch.device("cpu")) == 7 and rules.min_clip_fraction == 0.9
    old = load_detector(save_small_detector(tmp_path / "old.pt", model, "none", None, None))
    from_params = scoring_rules(old, PARAMS)
    evaluate, build = load_section(PARAMS, "evaluate"), load_section(PARAMS, "build")
    assert from_params.limits.cpu_max_segments == evaluate.cpu_max_batch_segments
    assert from_params.min_clip_fraction == build.min_clip_fraction
    with pytest.raises(DataError, match="absent.yaml: no such params file"):
        scoring_rules(old, tmp_path / "absent.yaml")


def test_a_recording_shorter_than_the_detectors_minimum_is_refused(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval()
    strict = save_small_detector(tmp_path / "strict.pt", model, "none", LIMITS, 0.9)
    noise = 0.1 * np.random.default_rng(0).standard_normal(int(0.5 * RATE))
    sf.write(tmp_path / "short.wav", noise.astype(np.float32), RATE)
    out = tmp_path / "out.csv"
    assert _predict(tmp_path / "short.wav", "--model", strict, "--out", out) == 0
    assert _rows(out)["short.wav"]["status"] == "error"
    lenient = save_small_detector(tmp_path / "lenient.pt", model, "none", LIMITS, 0.1)
    assert _predict(tmp_path / "short.wav", "--model", lenient, "--out", out, "--force") == 0
    assert _rows(out)["short.wav"]["status"] == "ok"


def test_unusable_entries_get_error_rows_and_the_rest_an_answer(tmp_path: Path,
                                                                detector_path: Path) -> None:
    root = tmp_path / "recordings"
    root.mkdir()
    noise = 0.1 * np.random.default_rng(0).standard_normal(RATE)
    sf.write(root / "good.wav", noise.astype(np.float32), RATE, subtype="PCM_16")
    header = bytearray((root / "good.wav").read_bytes())
    assert header[12:16] == b"fmt " and int.from_bytes(header[24:28], "little") == RATE
    header[24:28] = bytes(4)                                   # the `fmt ` chunk's sample rate
    (root / "rate_zero.wav").write_bytes(bytes(header))
    (root / "folder.wav").mkdir()
    (root / "loop.wav").symlink_to("loop.wav")
    out = tmp_path / "out.csv"
    assert _predict(root, "--model", detector_path, "--out", out) == 0
    rows = _rows(out)
    assert rows["good.wav"]["status"] == "ok"
    notes = {name: row["notes"] for name, row in rows.items() if row["status"] == "error"}
    assert notes == {"rate_zero.wav": f"{root / 'rate_zero.wav'}: invalid header: sample rate 0 Hz",
                     "folder.wav": f"{root / 'folder.wav'}: is a directory",
                     "loop.wav": f"{root / 'loop.wav'}: symlink loop"}
