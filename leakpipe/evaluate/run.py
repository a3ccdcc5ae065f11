"""Stage `evaluate`: score val and test, choose the operating point on val, report on test.

``evaluate_detector`` is the one orchestrator (no I/O besides reading the splits):

1. score every file of the val split (``forward.score_split``);
2. choose the threshold (and with ``select_rule`` the rule) on val by the stated criterion
   (``select.select_operating_point``): the test split is not even opened yet;
3. score the test split and apply that point unchanged: file / segment / per-class metrics,
   bootstrap intervals over test recordings, prediction rows.

``write_outputs`` writes the DVC outputs atomically: `metrics/eval.json` (metric names nested
at their slashes, as train's: DVC shows ``test/file_f1`` as ``test.file_f1``), the plot files,
the predictions CSV and the detector file carrying the chosen operating point (what `leakpipe
predict` uses), so the threshold that is reported is the one that is saved (a
reported threshold that differs from the deployed one makes every reported figure wrong).
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.commands._common import write_json_atomic
from leakpipe.config import EvaluateConfig
from leakpipe.constants import H5_CLIP_INDEX
from leakpipe.data.reader import open_split
from leakpipe.data.schema import task_labels
from leakpipe.detector import Detector, save_detector
from leakpipe.errors import DataError
from leakpipe.evaluate.bootstrap import bootstrap_intervals
from leakpipe.evaluate.forward import (
    SplitScores,
    eval_placement,
    open_batches,
    resolve_device,
    score_split,
    segment_cap,
)
from leakpipe.evaluate.metrics import diagnose
from leakpipe.evaluate.plots import PLOT_FILES, plot_data
from leakpipe.evaluate.report import (
    FileTable,
    binary_figures,
    class_metrics,
    frac_long_over,
    interval_metrics,
    prediction_rows,
    prefixed,
)
from leakpipe.evaluate.select import OperatingPoint, select_operating_point
from leakpipe.evaluate.voting import VotingConfig, file_scores, threshold_grid
from leakpipe.train.loop import Precision, resolve_precision
from leakpipe.train.outputs import nest

log = logging.getLogger(__name__)

VAL, TEST = "val", "test"
DETECTOR_METRICS = ("test/file_f1", "test/file_recall", "test/file_specificity",
                    "test/file_roc_auc", "val/file_f1")
PLAN_MEMORY_KEYS = ("safety", "host_reserve_mb", "device_reserve_mb")


@dataclass(frozen=True)
class SplitResult:
    """One split under the chosen operating point."""

    name: str
    table: FileTable
    scores: SplitScores
    file_score: np.ndarray     # (F,) rule score: LEAK <=> score >= threshold
    decision: np.ndarray       # (F,) bool
    frac_over: np.ndarray      # (F,) share of long segments at or above the threshold
    metrics: dict[str, float]

    def rows(self) -> list[dict[str, Any]]:
        return prediction_rows(self.name, self.table, self.file_score, self.frac_over,
                               self.decision, self.scores.class_probs.argmax(axis=1))


@dataclass(frozen=True)
class Evaluation:
    point: OperatingPoint
    prob_mode: str
    val: SplitResult
    test: SplitResult
    metrics: dict[str, float]   # every numeric figure (eval.json and MLflow)
    info: dict[str, str]        # how the point was chosen (eval.json, MLflow params)


@dataclass(frozen=True)
class _Setup:
    """How splits are placed and run, resolved once."""

    device: Any
    precision: Precision
    channels_last: bool
    placement: str
    memory: Mapping[str, Any]
    cap: int
    progress: bool


# -- reading ------------------------------------------------------------------------------------

def read_file_table(path: Path, detector: Detector) -> FileTable:
    """Labels and ids of a split; its classes and features must be the detector's."""
    with open_split(path) as split:
        if split.class_names != detector.data_class_names:
            raise DataError(f"{path}: classes {list(split.class_names)} differ from the "
                            f"model's {list(detector.data_class_names)}")
        if split.features != detector.features:
            raise DataError(f"{path}: feature config differs from the one the model was "
                            "trained on; rebuild the splits or retrain")
        if split.n_files == 0:
            raise DataError(f"{path}: the split holds no files")
        ids = split.recording_ids
        clip = split.h5[H5_CLIP_INDEX][:] if H5_CLIP_INDEX in split.h5 else _clip_counter(ids)
        return FileTable(recording_id=ids, clip=np.asarray(clip, dtype=np.int64),
                         group=split.groups,
                         label=task_labels(split.labels, split.class_names, detector.binary),
                         class_names=detector.class_names, leak_index=detector.leak_index)


def _clip_counter(ids: np.ndarray) -> np.ndarray:
    """Running count of each recording id (0, 1, ... per recording), for splits without it."""
    seen: dict[str, int] = {}
    out = np.empty(len(ids), dtype=np.int64)
    for i, rid in enumerate(ids):
        out[i] = seen.get(rid, 0)
        seen[rid] = out[i] + 1
    return out


def plan_memory(plan: Mapping[str, Any]) -> dict[str, float]:
    """The preload plan's safety and reserves (its ``params``), which size evaluation batches."""
    params = plan.get("params", {})
    missing = [k for k in PLAN_MEMORY_KEYS if k not in params]
    if missing:
        raise DataError(f"preload plan lacks params.{missing[0]}; re-run `dvc repro preload`")
    return {k: float(params[k]) for k in PLAN_MEMORY_KEYS}


# -- orchestration ------------------------------------------------------------------------------

def evaluate_detector(detector: Detector, paths: Mapping[str, Path], plan: Mapping[str, Any],
                      cfg: EvaluateConfig, *, progress: bool = False) -> Evaluation:
    """Choose the operating point on ``paths['val']``, report it on ``paths['test']``."""
    setup = _setup(plan, cfg, progress)
    model = detector.inference_model().to(setup.device)
    val_table = read_file_table(paths[VAL], detector)
    val_scores = _score(model, detector, paths[VAL], setup, cfg, VAL)
    point = select_operating_point(
        val_scores.seg_probs, val_table.truth,
        threshold_grid(cfg.threshold_min, cfg.threshold_max, cfg.threshold_step),
        rule=cfg.rule, vote_fraction=cfg.vote_fraction, criterion=cfg.criterion,
        target=cfg.target, select_rule=cfg.select_rule)
    log.info("operating point chosen on val: %s at threshold %g (%s = %.4f)", point.rule,
             point.threshold, cfg.criterion, point.value)
    test_table = read_file_table(paths[TEST], detector)   # opened only after the choice
    test_scores = _score(model, detector, paths[TEST], setup, cfg, TEST)
    val = split_result(VAL, val_table, val_scores, point, cfg, detector.binary, bootstrap=False)
    test = split_result(TEST, test_table, test_scores, point, cfg, detector.binary,
                        bootstrap=True)
    info = {"eval/rule": point.rule, "eval/prob_mode": cfg.prob_mode,
            "eval/criterion": cfg.criterion, **_diagnoses(point, val, test)}
    return Evaluation(point=point, prob_mode=cfg.prob_mode, val=val, test=test,
                      metrics=_summary_metrics(point, detector, val, test), info=info)


def _diagnoses(point: OperatingPoint, *results: SplitResult) -> dict[str, str]:
    """Why a split's F1 is 0 or its decisions collapsed to one class."""
    out = {}
    for result in results:
        note = diagnose(result.table.truth, result.decision, result.file_score, point.threshold)
        if note:
            log.warning("%s files: %s", result.name, note)
            out[f"eval/{result.name}_diagnosis"] = note
    return out


def _setup(plan: Mapping[str, Any], cfg: EvaluateConfig, progress: bool) -> _Setup:
    device = resolve_device(cfg.device)
    return _Setup(device=device, precision=resolve_precision(cfg.amp, device),
                  channels_last=device.type == "cuda",
                  placement=eval_placement(plan["placement"], device),
                  memory=plan_memory(plan), progress=progress,
                  cap=segment_cap(cfg.max_batch_segments, cfg.cpu_max_batch_segments, device))


def _score(model: Any, detector: Detector, path: Path, setup: _Setup, cfg: EvaluateConfig,
           name: str) -> SplitScores:
    batches = open_batches(path, setup.placement, detector.model_cfg, setup.device,
                           setup.memory, setup.cap, detector.binary, detector.input_norm)
    scores = score_split(model, batches, cfg.prob_mode, setup.precision,
                         channels_last=setup.channels_last, progress=setup.progress,
                         desc=f"evaluate {name}")
    log.info("%s: %d files scored in %.2f s (%.0f files/s)", name, scores.n_files,
             scores.seconds, scores.n_files / max(scores.seconds, 1e-9))
    return scores


def split_result(name: str, table: FileTable, scores: SplitScores, point: OperatingPoint,
                 cfg: EvaluateConfig, binary: bool, *, bootstrap: bool) -> SplitResult:
    """Decisions and every figure of one split under ``point``."""
    file_score = file_scores(scores.seg_probs, point.rule, point.vote_fraction)   # (F,)
    decision = file_score >= point.threshold
    metrics = prefixed(f"{name}/file", binary_figures(table.truth, decision, file_score))
    metrics.update(_segment_metrics(name, table, scores, cfg.segment_threshold))
    if bootstrap:
        intervals = bootstrap_intervals(
            table.truth, decision, file_score, table.recording_id,
            resamples=cfg.bootstrap_resamples, confidence=cfg.confidence, seed=cfg.seed)
        metrics.update(interval_metrics(f"{name}/file", intervals))
    if not binary:
        metrics.update(_class_metrics(name, table, scores))
    metrics[f"{name}/files"] = float(scores.n_files)
    metrics[f"perf/eval_{name}_files_per_s"] = scores.n_files / max(scores.seconds, 1e-9)
    return SplitResult(name, table, scores, file_score, decision,
                       frac_long_over(scores.seg_probs, point.threshold), metrics)


def _segment_metrics(name: str, table: FileTable, scores: SplitScores,
                     threshold: float) -> dict[str, float]:
    per_file = scores.seg_probs[0].size
    truth = np.repeat(table.truth, per_file)                         # (F * L * S,)
    probs = scores.seg_probs.reshape(-1)                             # (F * L * S,)
    return prefixed(f"{name}/seg", binary_figures(truth, probs >= threshold, probs))


def _class_metrics(name: str, table: FileTable, scores: SplitScores) -> dict[str, float]:
    per_file = scores.seg_probs[0].size
    names = table.class_names
    out = class_metrics(name, "file", table.label, scores.class_probs.argmax(axis=1), names)
    out.update(class_metrics(name, "seg", np.repeat(table.label, per_file), scores.seg_pred,
                             names))
    return out


def _summary_metrics(point: OperatingPoint, detector: Detector, val: SplitResult,
                     test: SplitResult) -> dict[str, float]:
    return {"eval/threshold": point.threshold, "eval/vote_fraction": point.vote_fraction,
            "eval/criterion_value": point.value, "eval/target_met": float(point.met),
            "eval/model_threshold": detector.threshold, **val.metrics, **test.metrics}


# -- outputs ------------------------------------------------------------------------------------

def json_safe(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """NaN / inf -> null (strict JSON); everything else unchanged."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in metrics.items()}


def write_csv_atomic(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows with the same keys -> CSV at ``path`` (temporary sibling, then rename)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else [])
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(buffer.getvalue())
    tmp.replace(path)


def write_outputs(evaluation: Evaluation, detector: Detector, *, metrics_path: Path,
                  plots_dir: Path, predictions_path: Path, detector_path: Path) -> None:
    """Every DVC output of the stage, each written atomically."""
    test, point = evaluation.test, evaluation.point
    write_json_atomic(metrics_path, nest(json_safe({**evaluation.metrics, **evaluation.info})))
    data = plot_data(test.table.truth, test.decision, test.file_score, point.grid,
                     point.val_curve)
    for key, records in data.items():
        write_json_atomic(plots_dir / PLOT_FILES[key], records)
    write_csv_atomic(predictions_path, test.rows())
    save_detector(detector_path, model=detector.model, model_cfg=detector.model_cfg,
                  class_names=detector.class_names, data_class_names=detector.data_class_names,
                  binary=detector.binary, features=detector.features,
                  voting=VotingConfig(prob_mode=evaluation.prob_mode, rule=point.rule,
                                      vote_fraction=point.vote_fraction),
                  threshold=point.threshold,
                  metrics={k: evaluation.metrics[k] for k in DETECTOR_METRICS
                           if math.isfinite(evaluation.metrics.get(k, math.nan))},
                  input_norm=detector.input_norm)


