"""A `logger_stats` detector file end to end: `ship` writes it, `leakpipe predict` decides real
WAV recordings with it (a dead logger unusable, never NOLEAK), `leakpipe export` gives an ONNX
graph that onnxruntime runs to the same probabilities (missing bands included), `leakpipe
explain` says which statistics moved the score, exactly."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from leakpipe.cli import main
from leakpipe.detectors.registry import load_any_detector
from leakpipe.export.graph import cpu_session
from leakpipe.export.stats_graph import INPUT_NAME, OUTPUT_NAME
from leakpipe.features.recording_stats import recording_stats
from leakpipe.stats_detector import StatsDetector
from tests.helpers_detector import copied_store
from tests.test_ship import RATE, SPEC, _cv, _recording, _splits

LOW_RATE = 1000          # Hz: the 1000 Hz octave band lies above its Nyquist frequency

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stats-detector")
    _splits(root / "data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DVC_ROOT", str(root))
        mp.setenv("MLFLOW_TRACKING_URI", copied_store(root / "mlruns"))
        assert main(["ship", "--params", str(REPO / "params.yaml"),
                     "--cv", str(_cv(root, "logger_stats")), "--data-dir", str(root / "data"),
                     "--unvalidated", "--shipped", str(root / "shipped.pt"),
                     "--metrics", str(root / "ship.json"),
                     "--predictions", str(root / "p.csv"),
                     "--model-card", str(root / "card.md"),
                     "--plots-dir", str(root / "plots")]) == 0
    return root / "shipped.pt"


def _wavs(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    out = {"leak": _recording(rng, True), "traffic": _recording(rng, False),
           "dead": np.zeros(6 * RATE, dtype=np.float32)}
    paths = {}
    for name, x in out.items():
        paths[name] = folder / f"{name}.wav"
        sf.write(paths[name], x, RATE, subtype="PCM_16")
    return paths


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {Path(r["path"]).stem: r for r in csv.DictReader(handle)}


def test_predict_decides_each_recording_and_a_dead_logger_is_unusable(
        shipped: Path, tmp_path: Path) -> None:
    wavs = _wavs(tmp_path / "recs")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(tmp_path / "recs"), "--model", str(shipped), "--out", str(out),
                 "--no-progress"]) == 0
    rows = _rows(out)
    assert rows["leak"]["decision"] == "LEAK" and rows["traffic"]["decision"] == "NOLEAK"
    assert rows["dead"]["status"] == "unusable" and rows["dead"]["decision"] == ""
    assert "dead" in rows["dead"]["notes"]
    detector = load_any_detector(shipped)
    assert isinstance(detector, StatsDetector)
    # one decision scale: leak_prob >= threshold exactly when the call is LEAK
    for name in ("leak", "traffic"):
        r = rows[name]
        assert (float(r["leak_prob"]) >= float(r["threshold"])) == (r["decision"] == "LEAK")
        assert r["top_statistic"] and int(r["sample_rate"]) == RATE
    assert float(rows["leak"]["threshold"]) == pytest.approx(detector.prob_threshold, abs=1e-4)
    assert wavs["leak"].is_file()


def test_resume_refuses_another_detectors_csv_and_retries_failed_rows(
        shipped: Path, tmp_path: Path) -> None:
    wavs = _wavs(tmp_path / "recs")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(wavs["leak"]), "--model", str(shipped), "--out", str(out),
                 "--no-progress"]) == 0
    other = tmp_path / "other.pt"
    other.write_bytes(shipped.read_bytes() + b"")      # same bytes: the same detector
    assert main(["predict", str(tmp_path / "recs"), "--model", str(other), "--out", str(out),
                 "--resume", "--no-progress"]) == 0
    assert set(_rows(out)) == {"leak", "traffic", "dead"}
    detector_json = json.loads((tmp_path / "pred_detector.json").read_text())
    assert detector_json["rule"] == "logger_stats"
    (tmp_path / "pred_detector.json").write_text(json.dumps({**detector_json,
                                                            "sha256": "0" * 64}))
    assert main(["predict", str(tmp_path / "recs"), "--model", str(shipped), "--out", str(out),
                 "--resume", "--no-progress"]) == 3


def test_export_gives_an_onnx_graph_that_computes_the_same_probabilities(
        shipped: Path, tmp_path: Path) -> None:
    out = tmp_path / "edge"
    assert main(["export", "--model", str(shipped), "--out", str(out)]) == 0
    rules = json.loads((out / "rules.json").read_text())
    assert rules["kind"] == "logger_stats" and rules["onnx"]["max_abs_diff_vs_torch"] <= 1e-4
    detector = load_any_detector(shipped)
    rng = np.random.default_rng(5)
    stats = np.stack([recording_stats(_recording(rng, leak), RATE, SPEC)
                      for leak in (True, False, True, False)])           # (4, S_all)
    columns = [rules["all_statistics"].index(n) for n in rules["statistics"]]
    x = stats[:, columns].astype(np.float32)
    x[1, 0] = np.nan                                                     # a missing band
    session = cpu_session((out / "model.onnx").read_bytes())
    got = session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
    with_nan = stats.copy()
    with_nan[1, columns[0]] = np.nan
    np.testing.assert_allclose(got, detector.probability(with_nan), atol=1e-5)


def test_explain_gives_the_exact_contributions(shipped: Path, tmp_path: Path) -> None:
    wavs = _wavs(tmp_path / "recs")
    out = tmp_path / "why"
    assert main(["explain", str(wavs["leak"]), "--model", str(shipped), "--out",
                 str(out)]) == 0
    ex = json.loads((out / "leak.json").read_text())
    assert ex["kind"] == "logger_stats" and ex["decision"] == "LEAK"
    logit = ex["logit_bias"] + sum(c["contribution"] for c in ex["contributions"])
    assert 1.0 / (1.0 + math.exp(-logit)) == pytest.approx(ex["raw_score"], abs=1e-5)
    sizes = [abs(c["contribution"]) for c in ex["contributions"]]
    assert sizes == sorted(sizes, reverse=True)
    assert (out / "leak.png").stat().st_size > 0
    assert main(["explain", str(wavs["dead"]), "--model", str(shipped), "--out",
                 str(out)]) == 0                # unusable, as predict says: no call
    assert not (out / "dead.png").exists()
    # the call on predict's one scale: predict's CSV row of the same file says the same
    assert main(["predict", str(wavs["leak"]), "--model", str(shipped), "--out",
                 str(tmp_path / "pred.csv"), "--no-progress"]) == 0
    row = _rows(tmp_path / "pred.csv")["leak"]
    for key in ("verdict", "decision", "domain", "domain_reason"):
        assert ex[key] == row[key], key
    assert (ex["leak_prob"], ex["threshold"]) == (float(row["leak_prob"]),
                                                  float(row["threshold"]))
    assert ex["raw_threshold"] == load_any_detector(shipped).threshold != ex["threshold"]


def test_predict_gives_the_statistics_domain_check_and_the_verdict(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """predict's rows of a logger_stats detector carry the statistics' domain check, as the
    served detector answers it, and the verdict: a recording whose rate leaves a statistic the
    model reads missing is shifted, UNCERTAIN (the model's call kept), its notes the reason and
    the `leakpipe cv` command; in-domain ones are LEAK / NOLEAK, a dead logger UNUSABLE."""
    wavs = _wavs(tmp_path / "recs")
    low = _recording(np.random.default_rng(12), True)[: 6 * LOW_RATE]
    sf.write(tmp_path / "recs" / "low.wav", low, LOW_RATE, subtype="PCM_16")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(tmp_path / "recs"), "--model", str(shipped), "--out", str(out),
                 "--no-progress"]) == 0
    rows = _rows(out)
    assert set(rows) == {*wavs, "low"}
    for name, call in (("leak", "LEAK"), ("traffic", "NOLEAK")):
        r = rows[name]
        assert (r["domain"], r["domain_reason"], r["verdict"]) == ("in", "", call)
        assert 0.0 <= float(r["domain_distance"]) <= 1.0
        assert "leakpipe cv" not in r["notes"]
    shifted = rows["low"]
    assert shifted["status"] == "ok" and shifted["domain"] == "shifted"
    assert shifted["verdict"] == "UNCERTAIN" and shifted["decision"] in ("LEAK", "NOLEAK")
    assert shifted["leak_prob"] != ""                      # kept: the model's answer
    assert shifted["domain_reason"].startswith("band: ")
    assert shifted["domain_reason"] in shifted["notes"]
    assert "leakpipe cv --source" in shifted["notes"]
    assert rows["dead"]["verdict"] == "UNUSABLE" and rows["dead"]["domain"] == ""
    # ship kept the share of training recordings lacking each statistic: none lacked the
    # 1000 Hz band, so the low-rate recording missing it is shifted, the band named
    share = load_any_detector(shipped).missing_share
    assert share is not None and share.shape == (len(load_any_detector(shipped).net.names),)
    assert "band1000_" in shifted["domain_reason"]
    assert "1 UNCERTAIN" in capsys.readouterr().out        # the summary line counts them


def test_predict_checks_a_shipped_logger_stats_detectors_set(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ship keeps the set reference (tests/test_stats_set_check.py: how it is made, and a
    shifted set); recordings like the training ones are in, and no call changes."""
    _wavs(tmp_path / "recs")
    out = tmp_path / "pred.csv"
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "recs"), "--model", str(shipped), "--out", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("predict: set domain check: in (median D ")
    assert json.loads((tmp_path / "pred_domain.json").read_text())["set"]["domain"] == "in"
    assert not [r for r in _rows(out).values() if "UNCERTAIN as a set" in r["notes"]]


def test_predict_says_an_older_logger_stats_file_has_no_set_check(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    from leakpipe.stats_detector import save_stats_detector

    older = tmp_path / "older.pt"
    save_stats_detector(older, dataclasses.replace(load_any_detector(shipped),
                                                   val_distances=None))
    _wavs(tmp_path / "recs")
    out = tmp_path / "pred.csv"
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "recs"), "--model", str(older), "--out", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("predict: set domain check: none (a logger_stats detector keeps "
                              "no val distances")
    assert json.loads((tmp_path / "pred_domain.json").read_text())["set"]["domain"] == "unknown"
