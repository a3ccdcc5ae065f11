"""`leakpipe explain`: band occlusion finds the bands the detector reads, and moves with them.

The detector here reads one thing only: the loudest of mel bands 8-11 (a LeakCNN whose centre
taps pass one channel through, shifted so ReLU keeps it, and whose hidden unit reads the pooled
row of those four bands). The recording carries a loud pump tone in bands 1-3, which this
detector ignores, and band-limited "leak" noise inside bands 10-11, quieter than the pump.
Occlusion must credit bands 8-11, not the loudest ones; without the leak noise the call and the
credit go away.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import ModelConfig
from leakpipe.constants import BINARY_CLASSES, EXIT_DATA
from leakpipe.detector import load_detector
from leakpipe.explain.recording import explain_recording, to_json
from leakpipe.features.mel import band_centers_hz
from leakpipe.model import create_model
from leakpipe.predict.scoring import score_recordings
from leakpipe.runtime import make_runtime
from leakpipe.serve.model import log_served_detector
from tests.helpers_detector import (
    LIMITS,
    copied_store,
    one_torch_thread,
    save_small_detector,
    set_known_weights,
)
from tests.helpers_h5 import SMALL_FEATURES as F

_one_thread = pytest.fixture(autouse=True)(one_torch_thread)

READER_MODEL = ModelConfig(widths=(4, 4, 4), dropout=0.0, pool_h=4, hidden=4)
READ_ROW = 2            # pooled row 2 of 4 = mel bands 8-11 (two max pools halve 16 bands twice)
LEAK_GROUP = 2          # with 4 bands per group: bands 8-11
SHIFT_DB = 60.0         # conv1 bias: log-mel values here are about -45..10 dB; ReLU keeps x + 60
LOGIT_AT_DB = -25.0     # the band level at which the leak probability is 0.5
SECONDS = 2.0


def band_reader_detector(path: Path) -> Path:
    """Leak logit = max(log-mel of bands 8-11) - LOGIT_AT_DB, from both heads."""
    model = set_known_weights(create_model(READER_MODEL, len(BINARY_CLASSES)), leak=1)
    with torch.no_grad():
        model.features[0][0].bias[0] = SHIFT_DB
        model.fc[0].weight.zero_()
        model.fc[0].weight[0, READ_ROW] = 1.0
        model.head.bias[1] = -(SHIFT_DB + LOGIT_AT_DB)
        model.leak_head.bias[0] = -(SHIFT_DB + LOGIT_AT_DB)
    return save_small_detector(path, model, "none", model_cfg=READER_MODEL)


def band_noise(rng: np.random.Generator, n: int, low_hz: float, high_hz: float,
               rms: float) -> np.ndarray:
    spectrum = np.fft.rfft(rng.normal(size=n))
    hz = np.fft.rfftfreq(n, 1.0 / F.sample_rate)
    spectrum[(hz < low_hz) | (hz > high_hz)] = 0.0
    x = np.fft.irfft(spectrum, n)
    return rms * x / x.std()


def recording(path: Path, leak: bool) -> Path:
    """Background noise, a loud pump tone at band 2's centre, optionally leak noise between the
    centres of bands 10 and 11."""
    rng = np.random.default_rng(0)
    n = int(SECONDS * F.sample_rate)
    centres = band_centers_hz(F.n_mels, F.fmin, F.fmax)
    x = band_noise(rng, n, 0.0, F.fmax, 0.003)
    x += 0.3 * np.sin(2 * np.pi * centres[2] * np.arange(n) / F.sample_rate)
    if leak:
        x += band_noise(rng, n, centres[10], centres[11], 0.05)
    sf.write(path, x.astype(np.float32), F.sample_rate, subtype="FLOAT")
    return path


def explain(tmp_path: Path, wav: Path, fill: str = "floor") -> dict:
    """The explanation's JSON, in-process (no figure: drawing it takes seconds)."""
    det = load_detector(band_reader_detector(tmp_path / "detector.pt"))
    ex = explain_recording(wav, det, det.inference_model(), runtime=make_runtime("cpu"),
                           budget=LIMITS.cpu_max_segments, min_fraction=0.5,
                           bands_per_group=4, fill=fill)
    return to_json(ex)


@pytest.mark.parametrize("fill", ["floor", "median"])
def test_occlusion_credits_the_bands_the_detector_reads(tmp_path: Path, fill: str) -> None:
    got = explain(tmp_path, recording(tmp_path / "leak.wav", leak=True), fill)
    occlusion = occlusion_by_group(got)

    assert got["decision"] == "LEAK"
    assert got["occlusion"]["towards_leak"] == [LEAK_GROUP]
    assert occlusion[LEAK_GROUP]["raw_drop"] > 0.9
    assert occlusion[LEAK_GROUP]["decision_without"] == "NOLEAK"
    assert occlusion[LEAK_GROUP]["leak_prob_without"] < got["threshold"] <= got["leak_prob"]
    assert occlusion[LEAK_GROUP]["mel_bands"] == [8, 11]
    # the pump (bands 1-3) is the loudest thing in the recording, and gets no credit
    assert occlusion[0]["raw_drop"] == 0.0
    assert all(d > 0.9 for d in occlusion[LEAK_GROUP]["long_drop"])
    assert got["long_segments"]["at_or_over_raw_threshold"] == got["long_segments"]["count"]


def test_without_the_leak_bands_the_credit_goes(tmp_path: Path) -> None:
    with_leak = occlusion_by_group(explain(tmp_path, recording(tmp_path / "a.wav", leak=True)))
    got = explain(tmp_path, recording(tmp_path / "b.wav", leak=False))
    without = occlusion_by_group(got)

    assert got["decision"] == "NOLEAK"
    assert without[LEAK_GROUP]["raw_drop"] < 0.01 < 0.9 < with_leak[LEAK_GROUP]["raw_drop"]
    assert got["occlusion"]["towards_leak"] == []          # nothing left to credit


def test_explain_command_writes_figure_and_json_with_predicts_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`leakpipe explain` on a readable and an unreadable recording: one error line for the
    bad one, PNG + JSON for the other, whose timeline is predict's row's."""
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all")
    wav = recording(tmp_path / "leak.wav", leak=True)
    det = band_reader_detector(tmp_path / "detector.pt")
    out = tmp_path / "explained"

    code = main(["explain", str(bad), str(wav), "--model", str(det), "--out", str(out),
                 "--device", "cpu"])

    assert code == EXIT_DATA
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(err) == 1 and str(bad) in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["leak.json", "leak.png"]
    assert (out / "leak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    got = json.loads((out / "leak.json").read_text())
    assert got["occlusion"]["towards_leak"] == [LEAK_GROUP]
    row = predict_row(wav, det)
    assert floats(row["long_probs"]) == got["long_segments"]["probs"]
    assert floats(row["long_starts_s"]) == got["long_segments"]["starts_s"]
    assert row["decision"] == got["decision"]
    # the call on predict's one scale: the same verdict, leak_prob and threshold as its row
    for key in ("verdict", "leak_prob", "threshold", "domain", "domain_reason", "notes"):
        assert got[key] == row[key], key


def test_explain_loads_a_registered_detector_by_its_models_uri(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`leakpipe explain --model models:/<name>@champion`: the detector registered as evaluate
    registers it (a real SQLite MLflow store) explains a recording exactly as its file does."""
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    det = band_reader_detector(tmp_path / "detector.pt")
    with tracking.start_run("evaluate"):
        version = tracking.register_detector(log_served_detector(det), "explained")
    tracking.set_alias("explained", tracking.ALIAS_CHAMPION, version)
    wav = recording(tmp_path / "leak.wav", leak=True)
    uri = f"models:/explained@{tracking.ALIAS_CHAMPION}"

    for model, out in ((uri, "by_uri"), (str(det), "by_file")):
        assert main(["explain", str(wav), "--model", model, "--out", str(tmp_path / out),
                     "--device", "cpu"]) == 0

    got = json.loads((tmp_path / "by_uri" / "leak.json").read_text())
    assert got == json.loads((tmp_path / "by_file" / "leak.json").read_text())
    assert got["decision"] == "LEAK" and got["occlusion"]["towards_leak"] == [LEAK_GROUP]
    assert (tmp_path / "by_uri" / "leak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["explain", str(wav), "--model", "models:/explained@nowhere", "--out",
                 str(tmp_path / "none"), "--device", "cpu"]) == EXIT_DATA
    assert not (tmp_path / "none").exists()


def predict_row(wav: Path, detector_path: Path) -> dict:
    """`leakpipe predict`'s row of ``wav`` (what its CSV and the served detector hold)."""
    det = load_detector(detector_path)
    rows = score_recordings([wav], det, det.inference_model(), runtime=make_runtime("cpu"),
                            budget=LIMITS.cpu_max_segments, min_fraction=0.5)
    return next(rows)[0]


def floats(values: str | list[float]) -> list[float]:
    """A timeline field as numbers, whether a row holds it as a list or as CSV text."""
    return [float(v) for v in (values.split() if isinstance(values, str) else values)]


def occlusion_by_group(explained: dict) -> dict[int, dict]:
    return {g["group"]: g for g in explained["occlusion"]["groups"]}


def test_predict_explain_writes_an_explanation_for_each_leak_call_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`leakpipe predict --explain DIR`: the CSV as without the flag, and PNG + JSON in DIR
    for the recording called LEAK, none for the NOLEAK one; the JSON's call is the CSV's."""
    leak = recording(tmp_path / "leak.wav", leak=True)
    quiet = recording(tmp_path / "quiet.wav", leak=False)
    det = band_reader_detector(tmp_path / "detector.pt")
    out, explained = tmp_path / "pred.csv", tmp_path / "explained"

    code = main(["predict", str(leak), str(quiet), "--model", str(det), "--out", str(out),
                 "--explain", str(explained), "--device", "cpu", "--no-progress"])

    assert code == 0
    with out.open(newline="") as handle:
        calls = {Path(r["path"]).name: r["decision"] for r in csv.DictReader(handle)}
    assert calls == {"leak.wav": "LEAK", "quiet.wav": "NOLEAK"}
    assert sorted(p.name for p in explained.iterdir()) == ["leak.json", "leak.png"]
    assert json.loads((explained / "leak.json").read_text())["decision"] == "LEAK"
    assert "1 LEAK decisions" in capsys.readouterr().out


def test_predict_explain_without_a_leak_call_writes_nothing(tmp_path: Path) -> None:
    quiet = recording(tmp_path / "quiet.wav", leak=False)
    det = band_reader_detector(tmp_path / "detector.pt")
    explained = tmp_path / "explained"

    assert main(["predict", str(quiet), "--model", str(det), "--out", str(tmp_path / "p.csv"),
                 "--explain", str(explained), "--device", "cpu", "--no-progress"]) == 0
    assert not explained.exists()
