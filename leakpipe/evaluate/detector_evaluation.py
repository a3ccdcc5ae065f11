"""Stage `evaluate`: score val and test, choose the operating point on val, report on test.

``evaluate_detector`` is the one orchestrator (no I/O besides reading the splits):

1. score every file of the val split (``leakpipe.scoring``, the path training validation and
   `leakpipe predict` use too);
2. choose the threshold (and with ``select_rule`` the rule) on val by the stated criterion
   (``select.select_operating_point``): the test split is not even opened yet;
3. fit the calibration of the rule's score on the val clips (Platt scaling,
   ``leakpipe.decision.calibration``): what turns predict's ``leak_prob`` into a probability;
4. score the test split and apply that point unchanged: file / segment / per-class metrics
   of both splits, each with its bootstrap interval over the split's recordings (val's are
   in-sample for the threshold), the test files' ECE and Brier score before and after the
   calibration (``leakpipe.evaluate.reliability``), prediction rows;
5. with a train split among the paths, the domain reference (``leakpipe.evaluate.
   domain_reference``): train's band profiles, a distance threshold set on val so that about
   1 % of val recordings exceed it, and the share of test recordings it flags.

``evaluation_figures`` draws the same plots as matplotlib figures for MLflow.
``write_outputs`` writes the DVC outputs atomically: `metrics/eval.json` (metric names nested
at their slashes, as train's: DVC shows ``test/clip_f1`` as ``test.clip_f1``), the plot files,
the predictions CSV (its ``leak_score`` is the rule's raw score, the scale of the threshold
grid and of the ROC / PR thresholds; its ``leak_prob`` the calibrated probability, as in
predict's table) and the detector file carrying the chosen operating point
and the calibration (what `leakpipe predict` uses), so the threshold that is reported is the
one that is saved (a reported threshold that differs from the deployed one makes every
reported figure wrong).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from leakpipe.config import DecisionConfig, EvaluateConfig, QualityConfig
from leakpipe.constants import DECISION_NAMES, H5_CLIP_INDEX
from leakpipe.data.reader import open_split
from leakpipe.data.schema import task_labels
from leakpipe.decision.calibration import Calibration, fit_platt
from leakpipe.decision.domain import DomainReference
from leakpipe.decision.metrics import diagnose
from leakpipe.decision.select import OperatingPoint, select_operating_point
from leakpipe.decision.voting import VotingConfig, file_scores, threshold_grid
from leakpipe.detector import Detector, Network, save_detector, with_operating_point
from leakpipe.errors import DataError
from leakpipe.evaluate.domain_reference import build_reference, domain_figures
from leakpipe.evaluate.figures import FileTable, frac_long_over, prediction_rows
from leakpipe.evaluate.plots import (
    PLOT_FILES,
    confusion_figure,
    curve_figure,
    plot_data,
    threshold_figure,
)
from leakpipe.evaluate.reliability import (
    RELIABILITY_COLUMNS,
    RELIABILITY_FILE,
    calibration_figures,
    reliability_figure,
    reliability_rows,
)
from leakpipe.evaluate.split_metrics import Resampling, class_figures, split_figures
from leakpipe.features.mel import band_centers_hz
from leakpipe.files import write_csv_atomic, write_json_atomic
from leakpipe.metric_names import json_safe, nest
from leakpipe.runtime import Runtime
from leakpipe.scoring.batching import BatchLimits, open_batches
from leakpipe.scoring.score import Scores, score_batches

log = logging.getLogger(__name__)

VAL, TEST = "val", "test"
DETECTOR_METRICS = ("test/clip_f1", "test/clip_recall", "test/clip_specificity",
                    "test/clip_roc_auc", "val/clip_f1")
PLAN_MEMORY_KEYS = ("safety", "host_reserve_mb", "device_reserve_mb")


@dataclass(frozen=True)
class SplitResult:
    """One split under the chosen operating point."""

    name: str
    table: FileTable
    scores: Scores
    file_score: np.ndarray     # (F,) rule score: LEAK <=> score >= threshold
    decision: np.ndarray       # (F,) bool
    frac_over: np.ndarray      # (F,) share of long segments at or above the threshold
    metrics: dict[str, float]

    def rows(self, calibration: Calibration) -> list[dict[str, Any]]:
        """The predictions table's rows, ``leak_prob`` through ``calibration``."""
        return prediction_rows(self.name, self.table, self.file_score,
                               calibration.prob(self.file_score), self.frac_over,
                               self.decision, self.scores.class_probs.argmax(axis=1))


@dataclass(frozen=True)
class Evaluation:
    point: OperatingPoint
    prob_mode: str
    val: SplitResult
    test: SplitResult
    metrics: dict[str, float]   # every numeric figure (eval.json and MLflow)
    info: dict[str, str]        # how the point was chosen (eval.json, MLflow params)
    calibration: Calibration    # rule score -> leak probability, fitted on val
    domain: DomainReference | None = None   # training band profiles, threshold on val


@dataclass(frozen=True)
class _Setup:
    """How splits are placed and run, resolved once."""

    runtime: Runtime
    placement: str
    limits: BatchLimits
    prob_mode: str
    progress: bool


# -- reading ------------------------------------------------------------------------------------

def read_file_table(path: Path, detector: Network) -> FileTable:
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


def batch_limits(plan: Mapping[str, Any], cfg: EvaluateConfig) -> BatchLimits:
    """Batch caps from `evaluate`, memory margins from the preload plan's ``params``."""
    params = plan.get("params", {})
    missing = [k for k in PLAN_MEMORY_KEYS if k not in params]
    if missing:
        raise DataError(f"preload plan lacks params.{missing[0]}; re-run `dvc repro preload`")
    return BatchLimits(max_segments=cfg.max_batch_segments,
                       cpu_max_segments=cfg.cpu_max_batch_segments,
                       **{k: float(params[k]) for k in PLAN_MEMORY_KEYS})


# -- orchestration ------------------------------------------------------------------------------

def evaluate_detector(network: Network, paths: Mapping[str, Path], plan: Mapping[str, Any],
                      cfg: EvaluateConfig, decision: DecisionConfig, runtime: Runtime, *,
                      progress: bool = False) -> Evaluation:
    """Choose the operating point on ``paths['val']``, report it on ``paths['test']``; with
    ``paths['train']``, also the domain reference (its figures among the metrics)."""
    setup = _Setup(runtime=runtime, placement=plan["placement"],
                   limits=batch_limits(plan, cfg), prob_mode=decision.prob_mode,
                   progress=progress)
    model = network.inference_model().to(runtime.device)
    val_table = read_file_table(paths[VAL], network)
    val_scores = _score(model, network, paths[VAL], setup, VAL)
    point = select_operating_point(
        val_scores.seg_probs, val_table.truth,
        threshold_grid(decision.threshold_min, decision.threshold_max, decision.threshold_step),
        rule=decision.rule, vote_fraction=decision.vote_fraction, criterion=cfg.criterion,
        target=cfg.target, select_rule=cfg.select_rule)
    log.info("operating point chosen on val: %s at threshold %g (%s = %.4f)", point.rule,
             point.threshold, cfg.criterion, point.value)
    seg_threshold = decision.segment_threshold
    val = split_result(VAL, val_table, val_scores, point, cfg, seg_threshold, network.binary,
                       bootstrap=True)
    calibration = fit_platt(val.file_score, val_table.truth)
    log.info("leak_prob calibration fitted on val: %s", calibration.describe())
    test_table = read_file_table(paths[TEST], network)   # opened only after the choices
    test_scores = _score(model, network, paths[TEST], setup, TEST)
    test = split_result(TEST, test_table, test_scores, point, cfg, seg_threshold,
                        network.binary, bootstrap=True)
    info = {"eval/rule": point.rule, "eval/prob_mode": decision.prob_mode,
            "eval/criterion": cfg.criterion, "eval/calibration": calibration.describe(),
            **_diagnoses(point, val, test)}
    metrics = {**_summary_metrics(point, val, test),
               **calibration_figures(TEST, test_table.truth, test.file_score, calibration,
                                     point.threshold)}
    domain = build_reference(network, paths) if "train" in paths else None
    if domain is not None:
        f = network.features
        metrics.update(domain_figures(domain, paths,
                                      band_centers_hz(f.n_mels, f.fmin, f.fmax)))
        info["eval/domain_reference"] = domain.fitted_on
    return Evaluation(point=point, prob_mode=decision.prob_mode, val=val, test=test,
                      metrics=metrics, info=info, calibration=calibration, domain=domain)


def _diagnoses(point: OperatingPoint, *results: SplitResult) -> dict[str, str]:
    """Why a split's F1 is 0 or its decisions collapsed to one class."""
    out = {}
    for result in results:
        note = diagnose(result.table.truth, result.decision, result.file_score, point.threshold)
        if note:
            log.warning("%s clips: %s", result.name, note)
            out[f"eval/{result.name}_diagnosis"] = note
    return out


def _score(model: Any, network: Network, path: Path, setup: _Setup, name: str) -> Scores:
    runtime = setup.runtime
    batches = open_batches(path, setup.placement, network.model_cfg, runtime.device,
                           setup.limits, network.binary, network.input_norm)
    info = batches.info
    scores = score_batches(model, batches, segments=tuple(info.segment_shape[:2]),
                           leak_index=info.leak_label, prob_mode=setup.prob_mode,
                           runtime=runtime, progress=setup.progress, desc=f"evaluate {name}",
                           total=len(batches))
    log.info("%s: %d clips scored in %.2f s (%.0f clips/s)", name, scores.n_files,
             scores.seconds, scores.n_files / max(scores.seconds, 1e-9))
    return scores


def split_result(name: str, table: FileTable, scores: Scores, point: OperatingPoint,
                 cfg: EvaluateConfig, segment_threshold: float, binary: bool, *,
                 bootstrap: bool) -> SplitResult:
    """Decisions and every figure of one split under ``point``; with ``bootstrap``, every
    figure's interval over recording draws (``split_metrics``)."""
    file_score = file_scores(scores.seg_probs, point.rule, point.vote_fraction)   # (F,)
    decision = file_score >= point.threshold
    resampling = (Resampling(cfg.bootstrap_resamples, cfg.confidence, cfg.seed)
                  if bootstrap else None)
    metrics = split_figures(name, table, decision, file_score, scores.seg_probs,
                            segment_threshold, resampling)
    if not binary:
        metrics.update(class_figures(name, table, scores.class_probs, scores.seg_pred,
                                     scores.seg_probs[0].size, resampling))
    metrics[f"{name}/clips"] = float(scores.n_files)    # the number of clips scored
    metrics[f"vitals/eval_{name}_clips_per_s"] = scores.n_files / max(scores.seconds, 1e-9)
    return SplitResult(name, table, scores, file_score, decision,
                       frac_long_over(scores.seg_probs, point.threshold), metrics)


def _summary_metrics(point: OperatingPoint, val: SplitResult,
                     test: SplitResult) -> dict[str, float]:
    return {"eval/threshold": point.threshold, "eval/vote_fraction": point.vote_fraction,
            "eval/criterion_value": point.value, "eval/target_met": float(point.met),
            **val.metrics, **test.metrics}


# -- outputs ------------------------------------------------------------------------------------

def detector_of(evaluation: Evaluation, network: Network, limits: BatchLimits,
                min_clip_fraction: float, *, quality: QualityConfig) -> Detector:
    """The network with the operating point chosen on val, its headline figures and the
    scoring rules `leakpipe predict` follows (``quality``: build's signal checks)."""
    point = evaluation.point
    return with_operating_point(
        network, voting=VotingConfig(prob_mode=evaluation.prob_mode, rule=point.rule,
                            vote_fraction=point.vote_fraction),
        threshold=point.threshold,
        metrics={k: evaluation.metrics[k] for k in DETECTOR_METRICS
                 if math.isfinite(evaluation.metrics.get(k, math.nan))},
        batch_limits=limits, min_clip_fraction=min_clip_fraction,
        calibration=evaluation.calibration, domain=evaluation.domain, quality=quality)


def write_outputs(evaluation: Evaluation, detector: Detector, *, metrics_path: Path,
                  plots_dir: Path, predictions_path: Path, detector_path: Path) -> None:
    """Every DVC output of the stage, each written atomically."""
    test, point = evaluation.test, evaluation.point
    write_json_atomic(metrics_path, nest(json_safe({**evaluation.metrics, **evaluation.info})))
    data = plot_data(test.table.truth, test.decision, test.file_score, point.grid,
                     point.val_curve)
    for key, records in data.items():
        write_json_atomic(plots_dir / PLOT_FILES[key], records)
    write_csv_atomic(plots_dir / RELIABILITY_FILE, _reliability(evaluation), RELIABILITY_COLUMNS)
    write_csv_atomic(predictions_path, test.rows(evaluation.calibration))
    save_detector(detector_path, detector)


def evaluation_figures(evaluation: Evaluation) -> dict[str, Figure]:
    """Every figure of an evaluation, by artifact name (without extension)."""
    test, val, point = evaluation.test, evaluation.val, evaluation.point
    data = plot_data(test.table.truth, test.decision, test.file_score, point.grid,
                     point.val_curve)
    figures = {
        "confusion_test": confusion_figure(test.table.truth, test.decision, DECISION_NAMES,
                                           f"test clips at {point.threshold:g}"),
        "confusion_val": confusion_figure(val.table.truth, val.decision, DECISION_NAMES,
                                          f"val clips at {point.threshold:g}"),
        "threshold_val": threshold_figure(data["threshold"], point.threshold,
                                          f"val, rule {point.rule}"),
        "reliability_test": reliability_figure(_reliability(evaluation), evaluation.metrics,
                                               TEST, "test clips: leak_prob reliability"),
    }
    if data["roc"]:
        figures["roc_test"] = curve_figure(data["roc"], "fpr", "tpr", "test clips: ROC", True)
        figures["pr_test"] = curve_figure(data["pr"], "recall", "precision", "test clips: PR")
    if len(test.table.class_names) > len(DECISION_NAMES):
        names = test.table.class_names
        figures["class_confusion_test"] = confusion_figure(
            test.table.label, test.scores.class_probs.argmax(axis=1), names,
            "test clips: top class")
    return figures


def _reliability(evaluation: Evaluation) -> list[dict[str, Any]]:
    test = evaluation.test
    return reliability_rows(test.table.truth, test.file_score, evaluation.calibration)
