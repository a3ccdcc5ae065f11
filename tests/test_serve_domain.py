"""The served detector's domain columns: on a detector that carries a domain reference, the
MLflow model answers ``domain`` / ``domain_distance`` / ``domain_reason`` as `leakpipe predict`
writes them for the same recordings (tests/test_serve.py's detector has no reference, so every
answer there is ``unknown``); and what a person reads on one scale: predict's CSV, the served
answer and `leakpipe explain`'s JSON give the same calibrated ``threshold`` and ``leak_prob``
and the same ``verdict`` (UNCERTAIN for a shifted recording, with its reason and the `leakpipe
cv` command in its notes).

Real pieces: a random-weight detector whose reference is fitted on white-noise recordings
(as tests/test_domain.py fits it) and with a Platt calibration (so the raw and the calibrated
threshold differ), logged as evaluate logs it into a SQLite MLflow store, answered through
MLflow's scoring-server handler (the JSON that `leakpipe serve` returns), predict's CSV and
explain's files of the same WAVs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pytest
import soundfile as sf
import torch

from leakpipe.cli import main
from leakpipe.constants import BINARY_CLASSES
from leakpipe.decision import domain as dm
from leakpipe.decision.calibration import Calibration
from leakpipe.decision.verdict import DECIMALS
from leakpipe.detector import Detector, load_detector, save_detector
from leakpipe.model import create_model
from leakpipe.predict.inputs import prepare
from leakpipe.serve.model import log_served_detector
from leakpipe.tracking import start_run
from tests.helpers_detector import (
    SMALL_MODEL,
    copied_store,
    one_torch_thread,
    restore_logging,
    save_small_detector,
)
from tests.helpers_predict import read_predictions

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)

RATE = 4096             # the small features' rate
UNIT = 10.0 ** -DECIMALS * (1 + 1e-9)   # one unit of a written figure's last decimal
SECONDS = 2.0
# (name, gain dB, sample rate): like the reference's recordings; half the rate (nothing above
# 1024 Hz: shifted, band); 40 dB quieter (shifted, level)
WAVS = [("like.wav", 0.0, RATE), ("narrow.wav", 0.0, RATE // 2), ("quiet.wav", -40.0, RATE)]
# the raw threshold 0.5 maps to leak_prob sigmoid(0.75) = 0.6792: two scales to confuse
CALIBRATION = Calibration(method="platt", slope=2.0, intercept=0.75, fitted_on=36, note="")


def _noise(path: Path, rng: np.random.Generator, gain_db: float, rate: int = RATE) -> Path:
    x = 0.1 * 10 ** (gain_db / 20) * rng.standard_normal(int(SECONDS * rate))
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, x.astype(np.float32), rate, subtype="FLOAT")
    return path


def _profile(path: Path, detector: Detector) -> np.ndarray:
    """(M,) band profile of a recording as predict computes it."""
    return dm.band_profile(np.concatenate([p.mel for p in prepare(path, detector, 0.5, 64)]))


def _with_reference(path: Path, root: Path) -> Path:
    """The detector file ``path`` with a reference of 24 train / 12 val white-noise
    recordings within +-3 dB of one another, and ``CALIBRATION``."""
    detector = load_detector(path)
    rng = np.random.default_rng(0)
    train = [_profile(_noise(root / f"t{i}.wav", rng, rng.uniform(-3, 3)), detector)
             for i in range(24)]
    val = [_profile(_noise(root / f"v{i}.wav", rng, rng.uniform(-3, 3)), detector)
           for i in range(12)]
    ref = dm.fit_threshold(dm.fit_reference(np.stack(train)), np.stack(val))
    save_detector(path, dataclasses.replace(detector, domain=ref, calibration=CALIBRATION))
    return path


@dataclasses.dataclass(frozen=True)
class Served:
    root: Path
    detector: Path
    uri: str
    wavs: list[Path]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("serve_domain")
    torch.manual_seed(0)
    model = create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval()
    detector = _with_reference(save_small_detector(root / "detector.pt", model, "none"),
                               root / "reference")
    rng = np.random.default_rng(7)
    wavs = [_noise(root / "new" / name, rng, gain, rate) for name, gain, rate in WAVS]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DVC_ROOT", str(root))
        patch.setenv("MLFLOW_TRACKING_URI", copied_store(root / "mlruns"))
        with start_run("evaluate"):
            uri = log_served_detector(detector)
        yield Served(root, detector, uri, wavs)


def _answers(served: Served) -> list[dict]:
    """What `leakpipe serve` answers a POST of the WAVs to /invocations: MLflow's scoring
    server's own handler (JSON in, the signature's parsing, the model, JSON out)."""
    from mlflow.pyfunc.scoring_server import invocations

    model = mlflow.pyfunc.load_model(served.uri)
    records = []
    for path in served.wavs:
        samples, rate = sf.read(path, dtype="float32")
        records.append({"waveform": samples.tolist(), "sample_rate": rate, "id": path.name})
    answer = invocations(json.dumps({"dataframe_records": records}), "application/json", model,
                         model.metadata.get_input_schema())
    assert answer.status == 200, answer.response
    return json.loads(answer.response)["predictions"]


def test_served_domain_columns_are_predicts(served: Served) -> None:
    out = served.root / "predict.csv"
    assert main(["predict", *map(str, served.wavs), "--model", str(served.detector),
                 "--out", str(out), "--no-progress", "--device", "cpu"]) == 0
    rows = read_predictions(out)
    answers = _answers(served)
    assert [a["id"] for a in answers] == [name for name, *_ in WAVS]
    for answer in answers:
        row = rows[answer["id"]]
        assert answer["status"] == "ok", answer["notes"]
        assert answer["domain"] == row["domain"], answer["id"]
        # served in one piece, the file block by block: one unit of the last written decimal
        assert abs(answer["domain_distance"] - float(row["domain_distance"])) <= UNIT, answer["id"]
        assert answer["domain_reason"] == row["domain_reason"], answer["id"]
    by_id = {a["id"]: a for a in answers}
    # the reference is used: not `unknown`, and each recording for its own reason
    assert (by_id["like.wav"]["domain"], by_id["like.wav"]["domain_reason"]) == ("in", "")
    assert by_id["narrow.wav"]["domain"] == by_id["quiet.wav"]["domain"] == "shifted"
    assert by_id["narrow.wav"]["domain_reason"].startswith("band")
    assert by_id["quiet.wav"]["domain_reason"].startswith("level")
    threshold = load_detector(served.detector).domain.threshold
    assert by_id["like.wav"]["domain_distance"] <= threshold < by_id["quiet.wav"][
        "domain_distance"]


def test_one_threshold_on_the_leak_prob_scale_and_the_verdict(
        served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    """predict's CSV, the served answer and explain's JSON of the same recordings: one
    threshold, the operating point on the calibrated leak_prob scale, with leak_prob >=
    threshold exactly when the model calls LEAK; the same verdict and notes: the in-domain
    recording is LEAK / NOLEAK, the two shifted ones UNCERTAIN (the model's call and leak_prob
    kept), their notes naming the reason and the `leakpipe cv` command."""
    out, why = served.root / "one_scale.csv", served.root / "why"
    assert main(["predict", *map(str, served.wavs), "--model", str(served.detector),
                 "--out", str(out), "--no-progress", "--device", "cpu"]) == 0
    assert " 2 UNCERTAIN (out of domain; " in capsys.readouterr().out   # the summary line
    assert main(["explain", *map(str, served.wavs), "--model", str(served.detector),
                 "--out", str(why), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out
    rows, answers = read_predictions(out), {a["id"]: a for a in _answers(served)}
    detector = load_detector(served.detector)
    threshold = round(detector.prob_threshold, 4)
    assert threshold == 0.6792 and detector.threshold == 0.5
    for name, *_ in WAVS:
        row, answer = rows[name], answers[name]
        explained = json.loads((why / name.replace(".wav", ".json")).read_text())
        assert float(row["threshold"]) == answer["threshold"] == explained["threshold"] \
            == threshold, name
        # three paths to the same figure (file blocks, one served array, explain's pass): to
        # one unit of the last written decimal; the call on each side of the threshold is
        # checked against its own figure below
        probs = (float(row["leak_prob"]), answer["leak_prob"], explained["leak_prob"])
        assert max(probs) - min(probs) <= UNIT, (name, probs)
        for call in (answer, explained, {**row, "leak_prob": float(row["leak_prob"])}):
            assert (call["leak_prob"] >= threshold) == (call["decision"] == "LEAK"), name
        assert row["verdict"] == answer["verdict"] == explained["verdict"], name
        assert row["notes"] == answer["notes"] == explained["notes"], name
        assert explained["raw_threshold"] == 0.5
    assert rows["like.wav"]["verdict"] == rows["like.wav"]["decision"] in ("LEAK", "NOLEAK")
    assert "leakpipe cv" not in rows["like.wav"]["notes"]
    for name in ("narrow.wav", "quiet.wav"):
        row = rows[name]
        assert (row["domain"], row["verdict"]) == ("shifted", "UNCERTAIN")
        assert row["decision"] in ("LEAK", "NOLEAK") and row["leak_prob"] != ""
        assert row["domain_reason"] and row["domain_reason"] in row["notes"]
        assert "`leakpipe cv --source " in row["notes"]
        assert f"{name}: UNCERTAIN (leak_prob {float(row['leak_prob']):.4f}, threshold " \
               f"0.6792; the model's call {row['decision']}; domain shifted: " \
               f"{row['domain_reason']})" in lines
