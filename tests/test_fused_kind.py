"""A `fused` detector end to end: `ship` with ``detector.method: fused`` stacks evaluate's CNN
and a logger_stats part fitted on real splits, and publishes its card, served model and
registered version (tests/test_serve_fused.py serves it); `leakpipe predict` decides real WAV
recordings with it from one decoding (a dead logger unusable, never NOLEAK) exactly as its
parts compute them; `leakpipe export` gives one ONNX graph that onnxruntime runs to the
detector's stacked probability (missing statistics included); `leakpipe explain` splits the
call exactly into the parts' evidence and the statistics' contributions."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from leakpipe.cli import main
from leakpipe.decision import domain as dm
from leakpipe.detectors.registry import load_any_detector
from leakpipe.export.fused_graph import OUTPUT, SEGMENTS, STATISTICS, as_segments
from leakpipe.export.graph import cpu_session
from leakpipe.features.recording_stats import recording_stats
from leakpipe.predict.fused import measure_fused
from leakpipe.predict.rules import scoring_rules
from leakpipe.predict.scoring import clip_scoring, score_segments
from leakpipe.runtime import make_runtime
from leakpipe.ship.stage import chosen_kind
from leakpipe.stats_detector import FusedDetector, save_fused_detector
from tests.conftest import PARAMS
from tests.helpers_detector import copied_store
from tests.helpers_fused import READ_ROW, SECONDS, clips_of, cv_selecting, params_with, ship, wavs
from tests.test_ship import RATE, SPEC
from tests.test_ship import _recording as _site_recording


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real `ship` of a fused detector, its card, served model and registered version
    included (into a private SQLite store; every output under the temporary root)."""
    root = tmp_path_factory.mktemp("fused")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DVC_ROOT", str(root))
        mp.setenv("MLFLOW_TRACKING_URI", copied_store(root / "mlruns"))
        assert ship(root, params_with(root, "fused"), root / "absent-cv.json") == 0
    return root / "shipped.pt"


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {Path(r["path"]).stem: r for r in csv.DictReader(handle)}


def _by_hand(detector: FusedDetector, wav: Path) -> tuple[float, np.ndarray]:
    """A recording's CNN part and statistics computed apart from predict: the whole file
    read, cut into its 1 s clips, scored by predict's scoring path; the statistics at once."""
    x, rate = sf.read(wav, dtype="float32")
    assert rate == RATE
    seg = score_segments(detector.cnn, detector.cnn.inference_model(), clips_of(x),
                         make_runtime("cpu"), 4096)                          # (6, L, S)
    return detector.cnn_probability(seg), recording_stats(x, RATE, SPEC)


def test_ship_stacks_the_cnn_and_the_statistics_on_val(shipped: Path) -> None:
    report = json.loads((shipped.parent / "ship.json").read_text())
    assert report["kind"] == "fused" and report["method"] == "fused"
    test = report["test"]
    assert test["recordings"] == 12 and test["sites"] == 6
    assert test["recording_roc_auc"] > 0.8 and "recording_f1_ci_low" in test
    assert {"cnn_recording_roc_auc", "logger_stats_recording_roc_auc"} <= set(test)
    detector = load_any_detector(shipped)
    assert isinstance(detector, FusedDetector)
    # both parts rank leaks first here: the stacker weighs both towards LEAK
    assert all(w > 0 for w in detector.stacker.weights)
    assert report["eval"]["stacker_cnn"] == pytest.approx(detector.stacker.weights[0])
    assert detector.threshold == pytest.approx(report["eval"]["threshold"])
    # evaluate's CNN detector is inside, unchanged
    cnn = load_any_detector(shipped.parent / "detector.pt")
    assert detector.cnn.voting == cnn.voting and detector.cnn.threshold == cnn.threshold
    rows = (shipped.parent / "predictions.csv").read_text().splitlines()
    assert rows[0] == "split,recording_id,group,truth,leak_prob,decision,threshold,raw_score"
    assert len(rows) == 1 + 24                                       # val and test recordings
    card = (shipped.parent / "card.md").read_text()              # the fused kind's own card
    assert card.startswith("# Model card: fused detector ") and "## Why this kind" in card
    assert (f"| cnn | {detector.stacker.weights[0]:+.3f} | "
            f"{test['cnn_recording_roc_auc']:.3f} |") in card


def test_auto_ships_fused_when_cv_selected_it(tmp_path: Path) -> None:
    kind, info = chosen_kind("auto", cv_selecting(tmp_path, "fused"))
    assert kind == "fused" and info["cv_selected_nested"]["per_fold"] == ["fused"]


def test_predict_decides_each_recording_from_one_decoding(shipped: Path,
                                                          tmp_path: Path) -> None:
    paths = wavs(tmp_path / "recs")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(tmp_path / "recs"), "--model", str(shipped), "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    rows = _rows(out)
    assert rows["leak"]["decision"] == "LEAK" and rows["traffic"]["decision"] == "NOLEAK"
    assert rows["dead"]["status"] == "unusable" and rows["dead"]["decision"] == ""
    assert "dead" in rows["dead"]["notes"] and rows["dead"]["leak_prob"] == ""
    detector = load_any_detector(shipped)
    for name in ("leak", "traffic"):
        row = rows[name]
        assert row["kind"] == "fused" and int(row["sample_rate"]) == RATE
        assert (float(row["leak_prob"]) >= float(row["threshold"])) == (row["decision"] == "LEAK")
        cnn_prob, stats = _by_hand(detector, paths[name])
        expected = float(detector.probability(cnn_prob, stats[None, :])[0])
        assert float(row["raw_score"]) == pytest.approx(expected, abs=2e-6)
        # both parts' domain check, as served: in domain here, so the verdict is the call
        assert (row["domain"], row["domain_reason"], row["verdict"]) == ("in", "",
                                                                        row["decision"])
        assert 0.0 <= float(row["domain_distance"]) <= 1.0
    assert rows["dead"]["verdict"] == "UNUSABLE"
    stamp = json.loads((tmp_path / "pred_detector.json").read_text())
    assert stamp["rule"] == "fused"


def test_a_shifted_set_makes_every_fused_call_uncertain_and_resume_checks_the_whole_set(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The set domain check of a fused detector reads its CNN part's distances: eight
    recordings of one hum far from the training sites, scored in two runs (--resume), are one
    shifted set; every call reads UNCERTAIN, its notes say why, decision and leak_prob stay."""
    detector = load_any_detector(shipped)
    assert detector.set_reference is None                  # this CNN predates the reference
    scoring = clip_scoring(detector.cnn, scoring_rules(detector.cnn, PARAMS), make_runtime("cpu"))
    rng = np.random.default_rng(5)
    profiles = []
    for i in range(36):                                   # the training world's recordings
        sf.write(tmp_path / "ref.wav", _site_recording(rng, bool(i % 2)), RATE, subtype="PCM_16")
        profiles.append(measure_fused(tmp_path / "ref.wav", detector, scoring).profile)
    ref = dm.fit_threshold(dm.fit_reference(np.stack(profiles[:24])), np.stack(profiles[24:]))
    model = tmp_path / "fused.pt"
    save_fused_detector(model, dataclasses.replace(
        detector, cnn=dataclasses.replace(detector.cnn, domain=ref)))
    assert load_any_detector(model).set_reference.val_distances.size == 12
    folder = tmp_path / "hum"
    folder.mkdir()
    t = np.arange(SECONDS * RATE) / RATE
    for i in range(8):
        x = 0.3 * np.sin(2 * np.pi * (300 + 20 * i) * t) + 1e-3 * rng.standard_normal(t.size)
        sf.write(folder / f"hum{i}.wav", x.astype(np.float32), RATE, subtype="PCM_16")
    out = tmp_path / "pred.csv"
    first = sorted(folder.glob("*.wav"))[:3]
    assert main(["predict", *map(str, first), "--model", str(model), "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["predict", str(folder), "--model", str(model), "--out", str(out),
                 "--resume", "--no-progress", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    written = json.loads((tmp_path / "pred_domain.json").read_text())
    assert written["set"]["n"] == 8 and len(written["distances"]) == 8   # kept rows counted
    assert written["set"]["domain"] == "shifted", written["set"]
    assert printed.startswith("predict: set domain check: shifted")
    assert "predict: 5 recordings (0 LEAK, 0 NOLEAK, 5 UNCERTAIN" in printed
    rows = _rows(out)
    assert len(rows) == 8
    for row in rows.values():
        assert row["verdict"] == "UNCERTAIN" and row["decision"] in ("LEAK", "NOLEAK")
        assert "UNCERTAIN as a set:" in row["notes"] and row["leak_prob"]


def test_export_gives_one_graph_that_computes_the_stacked_probability(
        shipped: Path, tmp_path: Path) -> None:
    out = tmp_path / "edge"
    assert main(["export", "--format", "onnx", "--model", str(shipped), "--out", str(out)]) == 0
    rules = json.loads((out / "rules.json").read_text())
    assert rules["kind"] == "fused" and rules["onnx"]["max_abs_diff_vs_torch"] <= 1e-4
    assert set(rules["onnx"]["inputs"]) == {SEGMENTS, STATISTICS}
    detector = load_any_detector(shipped)
    session = cpu_session((out / "model.onnx").read_bytes())
    columns = [rules["all_statistics"].index(n) for n in rules["statistics"]]
    worst = 0.0
    for name, wav in wavs(tmp_path / "recs").items():
        if name == "dead":
            continue
        x, _ = sf.read(wav, dtype="float32")
        clips = clips_of(x)
        seg = score_segments(detector.cnn, detector.cnn.inference_model(), clips,
                             make_runtime("cpu"), 4096)
        stats = recording_stats(x, RATE, SPEC).astype(np.float32)
        for missing in (None, 0, len(columns) - 1):           # a band missing, or none
            row = stats.copy()
            if missing is not None:
                row[columns[missing]] = np.nan
            got = session.run([OUTPUT], {SEGMENTS: as_segments(clips, rules["input_norm"]),
                                         STATISTICS: row[None, columns]})[0]
            expected = detector.probability(detector.cnn_probability(seg), row[None, :])
            worst = max(worst, float(np.abs(got - expected).max()))
    assert worst <= 1e-4


def test_explain_splits_the_call_into_the_parts_evidence(shipped: Path, tmp_path: Path) -> None:
    paths = wavs(tmp_path / "recs")
    out = tmp_path / "why"
    assert main(["explain", str(paths["leak"]), "--model", str(shipped), "--out",
                 str(out), "--device", "cpu"]) == 0
    ex = json.loads((out / "leak.json").read_text())
    assert ex["kind"] == "fused" and ex["decision"] == "LEAK"
    parts = {p["part"]: p for p in ex["parts"]}
    assert list(parts) == ["cnn", "logger_stats"]
    logit = ex["stacker_bias"] + sum(p["evidence"] for p in parts.values())
    assert 1.0 / (1.0 + math.exp(-logit)) == pytest.approx(ex["raw_score"], abs=1e-9)
    for p in parts.values():
        assert p["evidence"] == pytest.approx(p["weight"] * p["logit"])
    stats_logit = ex["statistics"]["logit_bias"] + sum(
        c["contribution"] for c in ex["statistics"]["contributions"])
    assert stats_logit == pytest.approx(parts["logger_stats"]["logit"], abs=1e-4)
    detector = load_any_detector(shipped)
    cnn_prob, stats = _by_hand(detector, paths["leak"])
    # the CNN part's timeline: every long segment of its clips, in time order
    timeline = ex["long_segments"]
    n_long = detector.cnn.features.n_long
    assert len(timeline["probs"]) == SECONDS * n_long                  # six 1 s clips
    assert timeline["starts_s"] == sorted(timeline["starts_s"])
    assert all(0.0 <= p <= 1.0 for p in timeline["probs"])
    assert timeline["cnn_threshold"] == detector.cnn.threshold
    assert ex["raw_score"] == pytest.approx(
        float(detector.probability(cnn_prob, stats[None, :])[0]), abs=2e-6)
    # the CNN part's bands: the stacked probability with each group occluded through the CNN
    # part, the statistics unchanged; the reader reads mel bands 8-11 (group 2) and no other
    bands = ex["occlusion"]
    for g in bands["groups"]:
        again = float(detector.probability(g["cnn_prob_without"], stats[None, :])[0])
        assert g["raw_score_without"] == pytest.approx(again, abs=2e-4)   # 4 decimals shown
        assert g["raw_drop"] == pytest.approx(ex["raw_score"] - g["raw_score_without"],
                                              abs=2e-4)
    assert bands["towards_leak"] == [READ_ROW]
    assert [g["mel_bands"] for g in bands["groups"]][READ_ROW] == [8, 11]
    # the call on predict's one scale: predict's CSV row of the same file says the same
    assert main(["predict", str(paths["leak"]), "--model", str(shipped), "--out",
                 str(tmp_path / "pred.csv"), "--no-progress", "--device", "cpu"]) == 0
    row = _rows(tmp_path / "pred.csv")["leak"]
    for key in ("verdict", "decision", "domain", "domain_reason"):
        assert ex[key] == row[key], key
    assert (ex["leak_prob"], ex["threshold"]) == (float(row["leak_prob"]),
                                                  float(row["threshold"]))
    assert ex["raw_threshold"] == detector.threshold != ex["threshold"]
    assert (out / "leak.png").stat().st_size > 0
    assert main(["explain", str(paths["dead"]), "--model", str(shipped), "--out",
                 str(out), "--device", "cpu"]) == 0     # unusable, as predict says: no call
    assert not (out / "dead.png").exists()
