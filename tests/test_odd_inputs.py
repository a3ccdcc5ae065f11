"""The same odd inputs get the same answer from `leakpipe predict` and `leakpipe explain`, for
every detector kind: a dead channel and a format leakpipe does not read are UNUSABLE (never a
call), a folder named like a recording is searched like any folder and is itself an unreadable
recording (predict's error row, explain's error line), an empty folder is refused with exit 3.
Both commands select, read and check recordings through predict's input path
(``predict.inputs``). Real tiny detectors of each kind and real files."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from leakpipe.cli import main
from leakpipe.constants import EXIT_DATA
from leakpipe.decision.calibration import Calibration
from leakpipe.decision.stacking import Stacker
from leakpipe.decision.voting import VotingConfig
from leakpipe.detector import load_detector, save_detector
from leakpipe.stats_detector import (
    FUSED_PARTS,
    FusedDetector,
    save_fused_detector,
    save_stats_detector,
)
from tests.helpers_detector import LIMITS, one_torch_thread
from tests.test_export import detector_file
from tests.test_fused_detector import _stats_detector

_one_thread = pytest.fixture(autouse=True)(one_torch_thread)
KINDS = ("cnn", "logger_stats", "fused")
RATE = 4096


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    cnn = detector_file(root / "cnn.pt")
    save_detector(cnn, dataclasses.replace(load_detector(cnn), batch_limits=LIMITS,
                                           min_clip_fraction=0.5))   # its scoring rules: served
    stats, _ = _stats_detector()
    save_stats_detector(root / "stats.pt", stats)
    fused = FusedDetector(
        cnn=dataclasses.replace(load_detector(cnn), voting=VotingConfig(
            prob_mode="blend", rule="long_vote", vote_fraction=0.5)),
        logger_stats=stats, stacker=Stacker(FUSED_PARTS, (1.5, 0.8), 0.1), threshold=0.5,
        calibration=Calibration(), metrics={})
    save_fused_detector(root / "fused.pt", fused)
    return {"cnn": cnn, "logger_stats": root / "stats.pt", "fused": root / "fused.pt"}


def _inputs(folder: Path) -> None:
    """good.wav, dead.wav (all zero), song.mp3 (a format leakpipe does not read) and a folder
    named x.wav holding inner.wav."""
    rng = np.random.default_rng(0)
    (folder / "x.wav").mkdir(parents=True)
    for path in (folder / "good.wav", folder / "x.wav" / "inner.wav"):
        sf.write(path, (0.05 * rng.standard_normal(2 * RATE)).astype(np.float32), RATE,
                 subtype="PCM_16")
    sf.write(folder / "dead.wav", np.zeros(2 * RATE, np.float32), RATE, subtype="PCM_16")
    (folder / "song.mp3").write_bytes(b"ID3" + bytes(64))


@pytest.mark.parametrize("kind", KINDS)
def test_predict_and_explain_answer_odd_inputs_alike(kind: str, models: dict[str, Path],
                                                     tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    recs = tmp_path / "recs"
    _inputs(recs)
    out = tmp_path / "pred.csv"
    assert main(["predict", str(recs), "--model", str(models[kind]), "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    with out.open(newline="") as handle:
        status = {Path(r["path"]).name: (r["status"], r["verdict"]) for r in csv.DictReader(handle)}
    assert status == {"good.wav": ("ok", status["good.wav"][1]), "inner.wav": status["inner.wav"],
                      "dead.wav": ("unusable", "UNUSABLE"), "song.mp3": ("unusable", "UNUSABLE"),
                      "x.wav": ("error", "UNUSABLE")}
    assert status["inner.wav"][0] == "ok"
    capsys.readouterr()
    explained = tmp_path / "explained"
    assert main(["explain", str(recs), "--model", str(models[kind]), "--out", str(explained),
                 "--device", "cpu"]) == EXIT_DATA                 # x.wav cannot be read
    captured = capsys.readouterr()
    printed = captured.out
    assert captured.err.count("error: ") == 1 and "x.wav" in captured.err
    for name in ("dead.wav", "song.mp3"):               # unusable there too: nothing explained
        assert f"{name}: UNUSABLE: " in printed and "no leak call to explain" in printed
        assert not (explained / f"{Path(name).stem}.png").exists()
    for name in ("good.wav", "inner.wav"):               # the verdicts predict wrote
        line = next(line for line in printed.splitlines() if f"/{name}: " in line)
        assert line.split(": ", 2)[2].startswith(status[name][1]), line
        assert (explained / f"{Path(name).stem}.png").is_file()


@pytest.mark.parametrize("kind", KINDS)
def test_an_empty_folder_is_refused_by_both(kind: str, models: dict[str, Path],
                                            tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["predict", str(tmp_path / "empty"), "--model", str(models[kind]), "--out",
                 str(tmp_path / "p.csv"), "--no-progress"]) == EXIT_DATA
    assert main(["explain", str(tmp_path / "empty"), "--model", str(models[kind]), "--out",
                 str(tmp_path / "e")]) == EXIT_DATA
    assert not (tmp_path / "p.csv").exists() and not (tmp_path / "e").exists()


def test_the_fused_summary_names_what_moved_the_score_the_intercept_included() -> None:
    from types import SimpleNamespace

    from leakpipe.explain.lines import main_term as _main_term

    parts = {"cnn": {"evidence": -0.4}, "logger_stats": {"evidence": -0.2}}
    leak = SimpleNamespace(parts=parts, bias=2.0, raw_score=0.8, raw_threshold=0.5)
    assert _main_term(leak).startswith("most from the stacker's intercept (+2.00 to the logit;")
    noleak = SimpleNamespace(parts=parts, bias=-0.1, raw_score=0.3, raw_threshold=0.5)
    assert _main_term(noleak).startswith("most from the cnn part (-0.40 to the logit;")


@pytest.mark.parametrize("kind", KINDS)
def test_serve_answers_a_dead_channel_and_a_good_recording_as_predict_does(
        kind: str, models: dict[str, Path], tmp_path: Path) -> None:
    """The served model (MLflow's pyfunc class with MLflow's own context) takes waveforms, not
    files: of the odd inputs a dead channel is the one it can be sent, and it is unusable there
    too; a good recording gets predict's verdict."""
    import pandas as pd
    from mlflow.pyfunc import PythonModelContext

    from leakpipe.serve.model import ARTIFACT, DetectorModel

    recs = tmp_path / "recs"
    _inputs(recs)
    out = tmp_path / "pred.csv"
    assert main(["predict", str(recs / "good.wav"), str(recs / "dead.wav"), "--model",
                 str(models[kind]), "--out", str(out), "--no-progress", "--device", "cpu"]) == 0
    with out.open(newline="") as handle:
        predicted = {Path(r["path"]).name: r for r in csv.DictReader(handle)}
    served = DetectorModel()
    served.load_context(PythonModelContext(artifacts={ARTIFACT: str(models[kind])},
                                           model_config={}))
    request = pd.DataFrame([{"waveform": sf.read(recs / name, dtype="float32")[0].tolist(),
                             "sample_rate": RATE, "id": name}
                            for name in ("good.wav", "dead.wav")])
    answers = {a["id"]: a for a in served.predict(None, request).to_dict("records")}
    assert (answers["dead.wav"]["status"], answers["dead.wav"]["verdict"]) == (
        "unusable", "UNUSABLE") == (predicted["dead.wav"]["status"],
                                    predicted["dead.wav"]["verdict"])
    assert answers["dead.wav"]["leak_prob"] is None and answers["dead.wav"]["decision"] in ("",
                                                                                           None)
    assert answers["good.wav"]["verdict"] == predicted["good.wav"]["verdict"]
    assert answers["good.wav"]["decision"] == predicted["good.wav"]["decision"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_served_row_is_the_predict_row(kind: str, models: dict[str, Path],
                                           tmp_path: Path) -> None:
    """Every column of predict's CSV has, in the served answer for the same recording, the
    value predict wrote (numbers within the CSV's rounding; where a note names the recording,
    the served one names it by its id): one code makes both rows."""
    import pandas as pd
    from mlflow.pyfunc import PythonModelContext

    from leakpipe.serve.model import ARTIFACT, DetectorModel

    recs = tmp_path / "recs"
    _inputs(recs)
    names = ("good.wav", "dead.wav")
    out = tmp_path / "pred.csv"
    assert main(["predict", *(str(recs / n) for n in names), "--model", str(models[kind]),
                 "--out", str(out), "--no-progress", "--device", "cpu"]) == 0
    with out.open(newline="") as handle:
        predicted = {Path(r["path"]).name: r for r in csv.DictReader(handle)}
    served = DetectorModel()
    served.load_context(PythonModelContext(artifacts={ARTIFACT: str(models[kind])},
                                           model_config={}))
    request = pd.DataFrame([{"waveform": sf.read(recs / n, dtype="float32")[0].tolist(),
                             "sample_rate": RATE, "id": n} for n in names])
    answers = {a["id"]: a for a in served.predict(None, request).to_dict("records")}
    for name in names:
        row, answer = predicted[name], answers[name]
        assert answer["kind"] == kind
        for column, text in row.items():
            if column == "path":
                continue
            text = text.replace(row["path"], name)
            value = answer[column]
            if text == "":
                assert value in ("", None), (name, column, value)
            elif isinstance(value, bool):
                assert str(value) == text, (name, column)
            elif isinstance(value, int | float):
                assert value == pytest.approx(float(text), abs=1e-4), (name, column)
            else:
                assert str(value) == text, (name, column, value, text)
