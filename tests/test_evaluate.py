"""Stage `evaluate` on a detector with known outputs: honest threshold, outputs, MLflow."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from leakpipe import tracking
from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.build import file_sha256
from leakpipe.cli import main
from leakpipe.config import EvaluateConfig, load_section
from leakpipe.constants import H5_LABELS, KNOWN_CLASSES
from leakpipe.data.input_norm import normalize_clips
from leakpipe.data.reader import open_split
from leakpipe.data.split_info import read_split_info
from leakpipe.decision.voting import segment_leak_prob
from leakpipe.detector import load_detector
from leakpipe.errors import DataError
from leakpipe.evaluate.detector_evaluation import (
    batch_limits,
    detector_of,
    evaluate_detector,
    write_outputs,
)
from leakpipe.files import save_torch_atomic
from leakpipe.runtime import cpu_runtime
from leakpipe.scoring import batching
from leakpipe.tracking import flatten
from tests.conftest import PARAMS
from tests.helpers_detector import (
    TINY_MODEL,
    copied_store,
    known_detector,
    leak_probs,
    one_torch_thread,
    restore_logging,
    write_plan,
    write_prob_split,
)
from tests.helpers_h5 import SMALL_FEATURES

SPLIT_FILES = {"val": 40, "test": 30}

_keep_logging = pytest.fixture(autouse=True)(restore_logging)


_one_thread = pytest.fixture(autouse=True)(one_torch_thread)


@pytest.fixture
def cfg() -> EvaluateConfig:
    return dataclasses.replace(load_section(PARAMS, "evaluate"), bootstrap_resamples=200)


DECISION = load_section(PARAMS, "decision")
PLAN_PARAMS = {"safety": 0.8, "host_reserve_mb": 0, "device_reserve_mb": 0}


def _write_splits(root: Path, seed: int = 0, spread: float = 0.15) -> dict[str, Path]:
    """val / test with two clips per recording; leaks score higher, with overlap."""
    rng = np.random.default_rng(seed)
    paths = {}
    for split, n in SPLIT_FILES.items():
        labels = np.repeat(rng.integers(0, len(KNOWN_CLASSES), n // 2), 2)
        ids = [f"{split}-r{i // 2}" for i in range(n)]
        paths[split] = write_prob_split(root / f"{split}.h5",
                                        leak_probs(rng, labels, KNOWN_CLASSES, spread=spread),
                                        labels, split=split, recording_ids=ids)
    return paths


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo-like folder: model, val / test splits, preload plan; no MLflow store."""
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'absent' / 'no.db'}")
    known_detector(tmp_path / "models" / "model.pt", binary=True)
    _write_splits(tmp_path / "data" / "processed")
    write_plan(tmp_path / "reports" / "preload.json")
    return tmp_path


def _relabel(path: Path, labels: np.ndarray) -> None:
    with h5py.File(path, "r+") as f:
        f[H5_LABELS][:] = labels


def _evaluate(root: Path, cfg: EvaluateConfig, placement: str = "ram", detector=None,
              decision=DECISION):
    detector = detector or load_detector(root / "models" / "model.pt")
    paths = {s: root / "data" / "processed" / f"{s}.h5" for s in SPLIT_FILES}
    return evaluate_detector(detector, paths, {"placement": placement, "params": PLAN_PARAMS},
                             cfg, decision, cpu_runtime())


def test_threshold_is_chosen_on_val_only(project: Path, cfg: EvaluateConfig) -> None:
    base = _evaluate(project, cfg)
    test_path = project / "data" / "processed" / "test.h5"
    leak = KNOWN_CLASSES.index("LEAK")
    with h5py.File(test_path, "r") as f:
        labels = f[H5_LABELS][:]
    _relabel(test_path, np.where(labels == leak, 0, leak))     # every test label flipped
    flipped = _evaluate(project, cfg)
    assert flipped.point.threshold == base.point.threshold
    assert flipped.calibration == base.calibration and base.calibration.method == "platt"
    assert flipped.point.rule == base.point.rule
    assert flipped.metrics["test/clip_f1"] != base.metrics["test/clip_f1"]
    val_path = project / "data" / "processed" / "val.h5"
    with h5py.File(val_path, "r") as f:
        val_labels = f[H5_LABELS][:]
    _relabel(val_path, np.where(val_labels == leak, 0, leak))  # the val split decides
    assert _evaluate(project, cfg).point.threshold != base.point.threshold


def test_target_criterion_reaches_its_target_on_val(project: Path,
                                                    cfg: EvaluateConfig) -> None:
    target = dataclasses.replace(cfg, criterion="target_sensitivity", target=1.0)
    result = _evaluate(project, target)
    assert result.point.met and result.metrics["val/clip_recall"] == 1.0
    f1 = _evaluate(project, cfg)
    assert result.point.threshold <= f1.point.threshold


def test_placements_and_batch_sizes_give_the_same_scores(project: Path,
                                                         cfg: EvaluateConfig) -> None:
    spf = read_split_info(project / "data" / "processed" / "test.h5", True).segments_per_file
    cfg = dataclasses.replace(cfg, cpu_max_batch_segments=10**6)
    ram = _evaluate(project, cfg)
    stream = _evaluate(project, cfg, placement="stream")
    one_file = _evaluate(project, dataclasses.replace(cfg, max_batch_segments=1))
    cpu_capped = _evaluate(project, dataclasses.replace(cfg, cpu_max_batch_segments=3 * spf))
    for other in (stream, one_file, cpu_capped):
        np.testing.assert_allclose(other.test.scores.seg_probs, ram.test.scores.seg_probs,
                                   atol=1e-6)
        assert other.metrics["test/clip_f1"] == ram.metrics["test/clip_f1"]
    assert one_file.test.scores.batch_files == 1
    assert cpu_capped.test.scores.batch_files == 3               # on CPU, the CPU cap
    assert ram.test.scores.batch_files == SPLIT_FILES["test"]   # every file in one pass


def test_batch_budget_follows_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    per_segment = batching.activation_bytes(TINY_MODEL, 16, 1)
    budget = batching.measure_budget()
    monkeypatch.setattr(batching, "measure_budget", lambda: dataclasses.replace(
        budget, host_available=100 * per_segment, cgroup_limit=None))
    limits = batching.BatchLimits(max_segments=10**6, cpu_max_segments=10**6, safety=1.0,
                                  host_reserve_mb=0.0, device_reserve_mb=0.0)
    cpu = torch.device("cpu")
    assert batching.batch_segments(TINY_MODEL, (16, 1), cpu, limits) == 100
    capped = dataclasses.replace(limits, cpu_max_segments=40)
    assert batching.batch_segments(TINY_MODEL, (16, 1), cpu, capped) == 40
    assert batching.batch_segments(TINY_MODEL, (16, 1), cpu,
                                   dataclasses.replace(limits, safety=0.5)) == 50


def test_multi_class_model_reports_per_class_metrics(tmp_path: Path,
                                                     cfg: EvaluateConfig) -> None:
    known_detector(tmp_path / "models" / "model.pt", binary=False)
    _write_splits(tmp_path / "data" / "processed")
    result = _evaluate(tmp_path, cfg, decision=dataclasses.replace(DECISION, prob_mode="aux"))
    m = result.metrics
    for split in ("val", "test"):    # F1 always; a rate only where its denominator is not empty
        for name, level in itertools.product(KNOWN_CLASSES, ("clip", "seg")):
            assert f"{split}/class/{name}/{level}_f1_ci_low" in m
    bounded = [k.removesuffix("_ci_low") for k in m if "/class/" in k and k.endswith("_ci_low")]
    assert {k.rsplit("_", 1)[-1] for k in bounded} == {"precision", "recall", "f1"}
    for figure in bounded:
        assert m[f"{figure}_ci_low"] <= m[figure] <= m[f"{figure}_ci_high"], figure
    assert result.metrics["test/clip_roc_auc"] > 0.8


def test_mismatched_features_are_refused(project: Path, cfg: EvaluateConfig) -> None:
    other = dataclasses.replace(SMALL_FEATURES, fmin=10.0)
    known_detector(project / "models" / "model.pt", features=other)
    with pytest.raises(DataError, match="feature config differs"):
        _evaluate(project, cfg)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_stage_writes_outputs_and_logs_to_mlflow(project: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(project / "mlruns"))
    monkeypatch.chdir(project)
    sha = file_sha256(project / "models" / "model.pt")
    with tracking.start_run("train", tags={tracking.TAG_MODEL_SHA256: sha}) as train_run:
        pass
    assert main(["validate", "--params", str(PARAMS), "--splits", "val", "test",
                 "--no-progress"]) == 0                # the stamp evaluate checks its splits by
    capsys.readouterr()
    assert main(["evaluate", "--params", str(PARAMS), "--no-progress"]) == 0
    # the unit in words: clips of recordings (the metric keys keep `file`)
    assert "; test: 30 clips of 15 recordings, per clip F1 " in capsys.readouterr().out

    metrics = flatten(json.loads((project / "metrics" / "eval.json").read_text()), sep="/")
    saved = load_detector(project / "models" / "detector.pt")
    assert saved.threshold == metrics["eval/threshold"]          # reported == saved
    assert saved.voting.rule == metrics["eval/rule"] == "long_vote"
    assert saved.quality == load_section(PARAMS, "build").quality   # predict's signal checks
    for split in ("val", "test"):             # every file and segment figure has its interval
        for key in ("clip_f1", "clip_roc_auc", "clip_specificity", "seg_f1", "seg_roc_auc",
                    "seg_pr_auc", "seg_recall"):
            name = f"{split}/{key}"
            assert metrics[f"{name}_ci_low"] <= metrics[name] <= metrics[f"{name}_ci_high"], name
    rows = _read_csv(project / "reports" / "predictions.csv")
    assert len(rows) == SPLIT_FILES["test"]
    assert list(rows[0]) == ["split", "recording_id", "clip", "group", "label", "leak",
                             "leak_score", "leak_prob", "frac_long_over", "leak_decision",
                             "top_class"]
    assert sum(r["leak_decision"] == "LEAK" for r in rows) == metrics["test/clip_tp"] + \
        metrics["test/clip_fp"]
    plots = project / "plots" / "eval"
    confusion = json.loads((plots / "confusion.json").read_text())
    assert len(confusion) == SPLIT_FILES["test"] and set(confusion[0]) == {"actual", "predicted"}
    assert set(json.loads((plots / "roc.json").read_text())[0]) == {"fpr", "tpr", "threshold"}
    assert len(json.loads((plots / "threshold.json").read_text())) == 97   # 0.02 .. 0.98
    # leak_prob calibrated on val: the detector holds the map, eval.json judges it on test
    assert saved.calibration.method == "platt"
    # the table's leak_prob is predict's: the raw score through the detector's calibration
    raw = np.array([float(r["leak_score"]) for r in rows])
    assert np.allclose([float(r["leak_prob"]) for r in rows], saved.calibration.prob(raw),
                       atol=1e-6)
    assert all((float(r["leak_score"]) >= saved.threshold) == (r["leak_decision"] == "LEAK")
               for r in rows if abs(float(r["leak_score"]) - saved.threshold) > 1e-6)
    assert metrics["eval/calibration_slope"] == pytest.approx(saved.calibration.slope)
    assert metrics["eval/prob_threshold"] == pytest.approx(saved.prob_threshold)
    for key in ("ece", "brier", "ece_uncalibrated", "brier_uncalibrated"):
        assert 0.0 <= metrics[f"test/{key}"] <= 1.0, key
    reliability = _read_csv(plots / "reliability.csv")
    assert len(reliability) == 10
    assert sum(int(r["count"]) for r in reliability) == SPLIT_FILES["test"]
    assert sum(int(r["count_uncalibrated"]) for r in reliability) == SPLIT_FILES["test"]

    run = mlflow.search_runs(search_all_experiments=True,
                             filter_string=f"tags.`{tracking.TAG_STAGE}` = 'evaluate'",
                             output_format="list")[0]
    assert run.data.tags[tracking.TAG_TRAIN_RUN] == train_run.run_id
    assert tracking.TAG_UNVALIDATED not in run.data.tags
    assert run.data.metrics["test/clip_f1"] == pytest.approx(metrics["test/clip_f1"])
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id,
                                                                      "evaluate")}
    for name in ("confusion_test.png", "roc_test.png", "pr_test.png", "threshold_val.png",
                 "reliability_test.png", "predictions.json", "predictions.csv", "eval.json",
                 "summary.json", "summary.png"):
        assert f"evaluate/{name}" in artifacts, name
    # a chart per headline figure; interval ends, classes and counts only in the summary table
    charts = set(run.data.metrics)
    assert not [k for k in charts if k.endswith(("_ci_low", "_ci_high", "_tp")) or "/class/" in k]
    assert "test/clip_f1" in charts and len(charts) <= 12          # a few headline charts
    table = json.loads(Path(mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, artifact_path="evaluate/summary.json")).read_text())
    rows = {row[0]: row for row in table["data"]}
    assert table["columns"] == ["figure", "value", "ci_low", "ci_high"]
    assert rows["test/clip_f1"][1:] == pytest.approx(
        [metrics["test/clip_f1"], metrics["test/clip_f1_ci_low"], metrics["test/clip_f1_ci_high"]])
    assert "test/clip_tp" in rows and not [k for k in rows if k.endswith("_ci_low")]
    assert run.data.metrics["test/ece"] == pytest.approx(metrics["test/ece"])
    logged = tracking.download_model(run.data.tags[tracking.TAG_DETECTOR_URI])
    assert load_detector(logged).threshold == saved.threshold

    # the card quotes a sim-to-real report that names this detector file's sha256
    detector_sha = file_sha256(project / "models" / "detector.pt")
    report = project / "s2r.json"
    report.write_text(json.dumps({
        "detector": {"path": "models/detector.pt", "sha256": detector_sha},
        "recordings": {"a.wav": "LEAK"}, "zero_shot": {"overall": {"roc_auc": 0.5}}}))
    assert main(["evaluate", "--params", str(PARAMS), "--no-progress",
                 "--sim-to-real", str(report)]) == 0
    assert file_sha256(project / "models" / "detector.pt") == detector_sha   # the same bytes
    card = (project / "reports" / "model_card.md").read_text()
    assert f"which scored this detector file (sha256 {detector_sha[:12]}" in card


def test_missing_plan_is_a_clear_error(project: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(project)
    (project / "reports" / "preload.json").unlink()
    assert main(["evaluate", "--params", str(PARAMS), "--unvalidated", "--no-progress"]) == 3
    assert "no preload plan" in capsys.readouterr().err
    assert not (project / "metrics" / "eval.json").exists()


def test_a_collapsed_test_split_is_diagnosed(project: Path, cfg: EvaluateConfig) -> None:
    test_path = project / "data" / "processed" / "test.h5"
    with h5py.File(test_path, "r") as f:
        labels = f[H5_LABELS][:]
    _relabel(test_path, np.where(labels == KNOWN_CLASSES.index("LEAK"), 0, labels))  # no leaks
    result = _evaluate(project, cfg)
    assert "no positives present" in result.info["eval/test_diagnosis"]
    assert "eval/val_diagnosis" not in result.info


@pytest.mark.parametrize("placement", ["ram", "stream"])
def test_the_detectors_input_norm_is_applied_and_carried_to_the_detector_file(
        project: Path, cfg: EvaluateConfig, placement: str) -> None:
    model_path = project / "models" / "model.pt"
    raw = torch.load(model_path, weights_only=True)
    save_torch_atomic({**raw, "input_norm": "clip_level"}, model_path)
    detector = load_detector(model_path)
    result = _evaluate(project, cfg, placement)
    with open_split(project / "data" / "processed" / "val.h5") as split:
        mel = torch.from_numpy(split.mel[:])                             # (F, L, S, M, T)
    x = normalize_clips(mel, "clip_level").reshape(-1, 1, *mel.shape[-2:])
    with torch.inference_mode():
        want = segment_leak_prob(*detector.model(x), detector.leak_index, DECISION.prob_mode)
    np.testing.assert_allclose(result.val.scores.seg_probs.reshape(-1), want.numpy(), atol=1e-5)
    plain = _evaluate(project, cfg, detector=dataclasses.replace(detector, input_norm="none"))
    assert not np.allclose(plain.val.scores.seg_probs, result.val.scores.seg_probs)
    out = project / "out"
    limits = batch_limits({"params": PLAN_PARAMS}, cfg)
    write_outputs(result, detector_of(result, detector, limits, 0.5, quality=DEAD_ONLY),
                  metrics_path=out / "eval.json", plots_dir=out / "plots",
                  predictions_path=out / "predictions.csv", detector_path=out / "detector.pt")
    written = load_detector(out / "detector.pt")
    assert written.input_norm == "clip_level" and written.quality == DEAD_ONLY

