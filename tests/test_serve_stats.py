"""The served detector of the `logger_stats` kind: the shipped detector, registered by ship as
the candidate, answers waveforms with one verdict per recording, the same columns as a `cnn`
detector's and the same figures as `leakpipe predict`'s rows; a dead logger is ``unusable``;
predict, export and explain take it by its ``models:/`` URI.

Real pieces: splits with recording statistics, the real `leakpipe ship` (fit, register) into a
real SQLite MLflow store, ``mlflow.pyfunc.load_model`` of the registered candidate and MLflow's
own scoring handler.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.detectors.registry import load_any_detector
from leakpipe.serve.model import OUTPUT_COLUMNS, input_example
from leakpipe.stats_detector import KIND
from tests.conftest import PARAMS
from tests.helpers_detector import copied_store
from tests.test_serve import _invoke
from tests.test_ship import RATE, _cv, _recording, _splits

NAME = load_section(PARAMS, "evaluate").registered_model
CANDIDATE = f"models:/{NAME}@{tracking.ALIAS_CANDIDATE}"
LOW_RATE = 1000          # Hz: the 1000 Hz octave band lies above its Nyquist frequency


@dataclass(frozen=True)
class Shipped:
    root: Path
    detector: Path
    store: str


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shipped]:
    root = tmp_path_factory.mktemp("serve-stats")
    _splits(root / "data")
    with pytest.MonkeyPatch.context() as patch:
        store = copied_store(root / "mlruns")
        patch.setenv("DVC_ROOT", str(root))
        patch.setenv("MLFLOW_TRACKING_URI", store)
        assert main(["ship", "--params", str(PARAMS), "--cv", str(_cv(root, KIND)),
                     "--data-dir", str(root / "data"), "--unvalidated",
                     "--shipped", str(root / "shipped.pt"), "--metrics", str(root / "ship.json"),
                     "--predictions", str(root / "p.csv"),
                     "--model-card", str(root / "card.md"),
                     "--plots-dir", str(root / "plots")]) == 0
        yield Shipped(root, root / "shipped.pt", store)


def _waveforms() -> dict[str, tuple[np.ndarray, int]]:
    rng = np.random.default_rng(21)
    return {"leak": (_recording(rng, True), RATE), "traffic": (_recording(rng, False), RATE),
            "zeros": (np.zeros(6 * RATE, np.float32), RATE),
            "constant": (np.full(6 * RATE, 0.25, np.float32), RATE),
            "low-rate": (_recording(rng, True)[: 6 * LOW_RATE], LOW_RATE)}


def _request(waves: dict[str, tuple[np.ndarray, int]]) -> list[dict]:
    return [{"waveform": x.astype(np.float64).tolist(), "sample_rate": rate, "id": name}
            for name, (x, rate) in waves.items()]


def test_ship_registers_the_shipped_detector_as_a_servable_candidate(shipped: Shipped) -> None:
    candidate = tracking.alias_version(NAME, tracking.ALIAS_CANDIDATE)
    assert candidate is not None and candidate.tags[tracking.TAG_DETECTOR_KIND] == KIND
    local = tracking.download_model(CANDIDATE)
    assert local.read_bytes() == shipped.detector.read_bytes()     # the shipped file itself
    info = mlflow.models.get_model_info(CANDIDATE)
    assert info.flavors["python_function"]
    assert [c["name"] for c in info.signature.outputs.to_dict()] == list(OUTPUT_COLUMNS)
    example = mlflow.models.Model.load(CANDIDATE).load_input_example()
    answer = mlflow.pyfunc.load_model(CANDIDATE).predict(example)
    assert list(answer["status"]) == ["ok", "ok"] and set(answer["rule"]) == {KIND}
    assert len(input_example(load_any_detector(shipped.detector))) == 2


def test_served_stats_detector_decides_recordings_and_refuses_a_dead_logger(
        shipped: Shipped) -> None:
    answers = {a["id"]: a for a in _invoke(mlflow.pyfunc.load_model(CANDIDATE),
                                           _request(_waveforms()))}
    assert answers["leak"]["decision"] == "LEAK" and answers["traffic"]["decision"] == "NOLEAK"
    for name in ("zeros", "constant"):                   # a silent logger is never NOLEAK
        dead = answers[name]
        assert dead["status"] == "unusable" and dead["decision"] == ""
        assert dead["leak_prob"] is None
        # predict's words for the same refusal (the row is made by predict's code)
        assert dead["notes"].startswith("channel 0 is dead (constant")
        assert "no decision" in dead["notes"] and dead["kind"] == KIND
    detector = load_any_detector(shipped.detector)
    for name in ("leak", "traffic"):
        a = answers[name]
        assert a["status"] == "ok" and a["rule"] == KIND and a["prob_mode"] == ""
        assert (a["leak_prob"] >= a["threshold"]) == (a["decision"] == "LEAK")
        assert a["threshold"] == pytest.approx(detector.prob_threshold, abs=1e-4)
        # what the stats kind does not have is null or empty, never a made-up figure
        assert a["vote_fraction"] is None and a["frac_long_over"] is None and a["n_long"] is None
        assert a["long_probs"] == [] and a["long_starts_s"] == [] and a["long_clips"] == []
        assert (a["duration_s"], a["band_hz"], a["band_limited"]) == (6.0, RATE / 2, False)
        assert a["domain"] == "in" and a["kind"] == KIND and a["sample_rate"] == RATE
        assert a["top_statistic"].split()[0] in detector.net.names
        assert (a["raw_score"] >= detector.threshold) == (a["decision"] == "LEAK")
    low = answers["low-rate"]                            # a band the model reads is missing
    assert low["status"] == "ok" and low["band_limited"] is True
    assert low["domain"] == "shifted" and low["domain_reason"].startswith("band: ")
    # shifted: UNCERTAIN, the model's call and leak_prob kept, the notes say why and what to do
    assert low["verdict"] == "UNCERTAIN" and low["decision"] in ("LEAK", "NOLEAK")
    assert low["leak_prob"] is not None and low["domain_reason"] in low["notes"]
    assert "`leakpipe cv --source " in low["notes"]
    assert [answers[n]["verdict"] for n in ("leak", "traffic", "zeros", "constant")] == [
        "LEAK", "NOLEAK", "UNUSABLE", "UNUSABLE"]


def test_served_answers_are_predicts_rows(shipped: Shipped, tmp_path: Path) -> None:
    """The same recordings as WAV files through `leakpipe predict` give the same calls, leak
    probabilities and thresholds."""
    waves = {k: v for k, v in _waveforms().items() if k != "low-rate"}
    for name, (x, rate) in waves.items():
        sf.write(tmp_path / f"{name}.wav", x, rate, subtype="FLOAT")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(tmp_path), "--model", str(shipped.detector), "--out", str(out),
                 "--no-progress"]) == 0
    with out.open(newline="") as handle:
        rows = {Path(r["path"]).stem: r for r in csv.DictReader(handle)}
    frame = pd.DataFrame(_request(waves))
    answers = mlflow.pyfunc.load_model(CANDIDATE).predict(frame).to_dict("records")
    assert [a["id"] for a in answers] == list(waves)
    for a in answers:
        row = rows[a["id"]]
        assert (a["status"], a["decision"]) == (row["status"], row["decision"])
        assert (a["verdict"], a["domain"]) == (row["verdict"], row["domain"])
        if row["leak_prob"]:
            assert a["leak_prob"] == float(row["leak_prob"])
        assert a["threshold"] == float(row["threshold"])


def test_a_bad_request_row_is_an_error_and_the_others_are_answered(shipped: Shipped) -> None:
    good = _request({"leak": _waveforms()["leak"]})[0]
    answers = _invoke(mlflow.pyfunc.load_model(CANDIDATE), [
        {**good, "id": "rate", "sample_rate": 4096.5},
        {**good, "id": "nan", "waveform": [float("nan")] + good["waveform"][1:]}, good])
    assert [a["status"] for a in answers] == ["error", "error", "ok"]
    assert answers[0]["notes"] == ("rate: sample_rate must be a positive whole number of Hz, "
                                   "got 4096.5")
    assert "non-finite" in answers[1]["notes"] and answers[1]["leak_prob"] is None


def test_predict_export_and_explain_take_the_registered_candidate(shipped: Shipped,
                                                                  tmp_path: Path) -> None:
    """`--model models:/<name>@candidate` names the registered logger_stats detector to every
    command that reads detectors, as a path to its file does."""
    x, rate = _waveforms()["leak"]
    sf.write(tmp_path / "leak.wav", x, rate, subtype="FLOAT")
    for model, out in ((CANDIDATE, "uri.csv"), (str(shipped.detector), "file.csv")):
        assert main(["predict", str(tmp_path / "leak.wav"), "--model", model,
                     "--out", str(tmp_path / out), "--no-progress"]) == 0
    rows = {}
    for out in ("uri.csv", "file.csv"):
        with (tmp_path / out).open(newline="") as handle:
            rows[out] = list(csv.DictReader(handle))
    assert rows["uri.csv"] == rows["file.csv"] and rows["uri.csv"][0]["decision"] == "LEAK"
    assert main(["export", "--model", CANDIDATE, "--out", str(tmp_path / "edge")]) == 0
    assert (tmp_path / "edge" / "model.onnx").stat().st_size > 0
    assert main(["explain", str(tmp_path / "leak.wav"), "--model", CANDIDATE,
                 "--out", str(tmp_path / "why")]) == 0
    assert (tmp_path / "why" / "leak.json").is_file()
