"""Stage `baselines`: fit on train, choose hyper-parameters and threshold on val, report on test.

``compare_models`` computes the stage's figures (no I/O besides reading the splits):

1. features of every split (``data.read_features``);
2. per model, every hyper-parameter combination is fitted on train and scored on val; the
   threshold of each is chosen on val by evaluate's own ``select_operating_point`` (a clip
   score is a file of one segment, whose ``mean`` rule is the score itself), and the
   combination with the best criterion value wins (ties: the higher val ROC-AUC, then the
   first in grid order);
3. the winner is applied unchanged to test: evaluate's file-level figures and its bootstrap
   over test recordings (same seed and resamples, so every model and the CNN are judged on the
   same recording draws);
4. the comparison: the CNN's figures from `metrics/eval.json` against the MFCC baseline with
   the highest test F1 (the strongest, so the margin is the CNN's smallest lead), and the
   level-only ROC-AUC.

``write_outputs`` writes `metrics/baselines.json` (names nested at the slashes, as eval.json)
and the DVC bar plot of test F1 with intervals, each atomically.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.baselines.data import ClipFeatures, check_compatible, read_features
from leakpipe.baselines.models import FEATURE_SET, MFCC, hyper_grid, leak_scores, make_model
from leakpipe.baselines.operating_point import choose_on_val
from leakpipe.baselines.recording_figures import recording_figures
from leakpipe.config import BaselinesConfig, DecisionConfig, EvaluateConfig
from leakpipe.constants import LEAK_CLASS
from leakpipe.decision.select import OperatingPoint
from leakpipe.decision.voting import decide
from leakpipe.errors import DataError
from leakpipe.evaluate.bootstrap import bootstrap_intervals, paired_f1_difference
from leakpipe.evaluate.figures import binary_figures, interval_metrics, prefixed, ranking_metrics
from leakpipe.files import write_json_atomic
from leakpipe.metric_names import json_safe, nest
from leakpipe.tracking import flatten

log = logging.getLogger(__name__)

TRAIN, VAL, TEST = "train", "val", "test"
CNN = "cnn"
LEVEL_MODEL = "level_logreg"
STATS_MODEL = "logger_stats"
PLOT_FILE = "comparison.json"
COMPARED = ("file_f1", "file_roc_auc")   # figures the comparison shows, with intervals


@dataclass(frozen=True)
class ModelResult:
    """One baseline at its val-chosen hyper-parameters and threshold."""

    name: str
    hyper: dict[str, Any]
    point: OperatingPoint
    metrics: dict[str, float]         # eval/*, val/file_*, test/file_* (+ _ci_low / _ci_high)
    grid: list[dict[str, Any]]        # every combination tried with its val figures
    test_decision: np.ndarray         # (F,) bool, test clips in file order: for paired intervals
    span: tuple[float, float] | None = None   # time.time() when its fit began and its scoring ended


@dataclass(frozen=True)
class PairedTest:
    """The CNN's test decisions, aligned with the test split's clips, and the bootstrap."""

    truth: np.ndarray                 # (F,) bool
    cnn_decision: np.ndarray          # (F,) bool
    recording_id: np.ndarray          # (F,) str
    resamples: int
    confidence: float
    seed: int


@dataclass(frozen=True)
class BaselineReport:
    results: dict[str, ModelResult]
    comparison: dict[str, Any]        # flat: best_baseline, cnn_file_f1, margin_file_f1, ...


def model_inputs(split: ClipFeatures, name: str) -> np.ndarray:
    return split.mfcc if FEATURE_SET[name] == MFCC else split.level


# -- selection on val ---------------------------------------------------------------------------

def fit_and_select(name: str, train: ClipFeatures, val: ClipFeatures, cfg: BaselinesConfig,
                   ev: EvaluateConfig,
                   decision: DecisionConfig) -> tuple[Any, dict[str, Any], OperatingPoint, list]:
    """Fit every grid combination on train; keep the best on val (model, hyper, point, grid)."""
    best, best_key, rows = None, None, []
    for hyper in hyper_grid(cfg, name):
        model = make_model(name, hyper, cfg.seed, cfg.threads)
        model.fit(model_inputs(train, name), train.truth)
        scores = leak_scores(model, model_inputs(val, name))
        point = choose_on_val(scores, val.truth, ev, decision)
        auc = ranking_metrics(val.truth, scores)["roc_auc"]
        key = (point.met, point.value, auc if math.isfinite(auc) else -math.inf)
        rows.append({**hyper, "val_criterion": point.value, "val_roc_auc": auc,
                     "threshold": point.threshold})
        if best_key is None or key > best_key:                 # first of equals wins
            best, best_key = (model, hyper, point), key
    model, hyper, point = best
    log.info("%s: %s chosen on val (%s %.4f at threshold %g, %d combinations)", name, hyper,
             ev.criterion, point.value, point.threshold, len(rows))
    return model, hyper, point, rows


# -- figures ------------------------------------------------------------------------------------

def split_figures(name: str, split: ClipFeatures, scores: np.ndarray, decision: np.ndarray,
                  ev: EvaluateConfig, *, bootstrap: bool) -> dict[str, float]:
    """evaluate's file-level figures of one split's (F,) decisions (test: with intervals)."""
    out = prefixed(f"{name}/file", binary_figures(split.truth, decision, scores))
    if bootstrap:
        intervals = bootstrap_intervals(split.truth, decision, scores, split.recording_id,
                                        resamples=ev.bootstrap_resamples,
                                        confidence=ev.confidence, seed=ev.seed)
        out.update(interval_metrics(f"{name}/file", intervals))
    out[f"{name}/files"] = float(split.n_files)
    return out


def evaluate_stats_model(splits: Mapping[str, ClipFeatures], cfg: BaselinesConfig,
                         ev: EvaluateConfig, decision: DecisionConfig) -> ModelResult:
    """logger_stats: ``C`` and threshold chosen by grouped inner CV over the train and val
    recordings, refitted on both (``logger_stats.fit_and_select``), so its val figures are of
    the val recordings' out-of-fold scores; every clip carries its recording's score, so the
    clip figures compare with the other models', and the recording figures (the unit it
    decides) come beside them."""
    from leakpipe.baselines import logger_stats as ls

    tables = {name: ls.read_recordings(splits[name].path) for name in (TRAIN, VAL, TEST)}
    fit = ls.fit_and_select(tables[TRAIN], tables[VAL], cfg.logger_stats, ev, decision)
    point = fit.point
    metrics = {"eval/threshold": point.threshold, "eval/criterion_value": point.value,
               "eval/target_met": float(point.met)}
    for split_name, bootstrap in ((VAL, False), (TEST, True)):
        table, split = tables[split_name], splits[split_name]
        scores = (fit.val_scores if split_name == VAL                         # (R,)
                  else ls.leak_probability(fit.net, table.stats[:, fit.used]))
        decided = decide(scores, point.threshold)[0]
        metrics.update(recording_figures(split_name, table.truth, decided, scores,
                                         table.group))
        clip = scores[table.clip_recording]                                   # (F,)
        decision_clip = decide(clip, point.threshold)[0]
        metrics.update(split_figures(split_name, split, clip, decision_clip, ev,
                                     bootstrap=bootstrap))
    return ModelResult(STATS_MODEL, {"C": fit.c, "forms": cfg.logger_stats.forms}, point,
                       metrics, fit.grid, np.asarray(decision_clip, dtype=bool))


def evaluate_model(name: str, splits: Mapping[str, ClipFeatures], cfg: BaselinesConfig,
                   ev: EvaluateConfig, decision: DecisionConfig) -> ModelResult:
    """Select on val, then apply the chosen model and threshold unchanged to test."""
    if name == STATS_MODEL:
        return evaluate_stats_model(splits, cfg, ev, decision)
    model, hyper, point, rows = fit_and_select(name, splits[TRAIN], splits[VAL], cfg, ev,
                                               decision)
    metrics = {"eval/threshold": point.threshold, "eval/criterion_value": point.value,
               "eval/target_met": float(point.met)}
    for split_name, bootstrap in ((VAL, False), (TEST, True)):
        split = splits[split_name]
        scores = leak_scores(model, model_inputs(split, name))                # (F,)
        decision = decide(scores, point.threshold)[0]                 # (F,) ties are LEAK
        metrics.update(split_figures(split_name, split, scores, decision, ev,
                                     bootstrap=bootstrap))
    return ModelResult(name, hyper, point, metrics, rows, np.asarray(decision, dtype=bool))


# -- comparison ---------------------------------------------------------------------------------

def cnn_figures(eval_metrics: Mapping[str, Any] | None, test_files: int,
                source: str) -> dict[str, float]:
    """The CNN's compared test figures from evaluate's flat metrics ({} when absent)."""
    if eval_metrics is None:
        return {}
    files = eval_metrics.get("test/files")
    if files != test_files:
        shown = int(files) if isinstance(files, int | float) else "no"
        raise DataError(f"{source}: evaluated {shown} test clips, the test split holds "
                        f"{test_files}; re-run `dvc repro evaluate`")
    out = {}
    for name in COMPARED:
        for suffix in ("", "_ci_low", "_ci_high"):
            value = eval_metrics.get(f"test/{name}{suffix}")
            out[f"{name}{suffix}"] = math.nan if value is None else float(value)
    return out


def compare(results: Mapping[str, ModelResult], cnn: Mapping[str, float],
            paired: PairedTest | None = None) -> dict[str, Any]:
    """Best MFCC baseline (highest test F1) against the CNN; the level-only ROC-AUC.

    With the CNN's own test decisions (``paired``), the margin gets a paired bootstrap
    interval: both scored on the same recording draws.
    """
    out: dict[str, Any] = {}
    mfcc = [r for r in results.values() if FEATURE_SET[r.name] == MFCC]
    if mfcc:
        best = max(mfcc, key=lambda r: r.metrics["test/file_f1"])  # first of equals
        out["best_baseline"] = best.name
        out.update(_figures("baseline", best.metrics))
    if cnn:
        out.update({f"cnn_{k}": v for k, v in cnn.items()})
    if mfcc and cnn:
        out["margin_file_f1"] = cnn["file_f1"] - out["baseline_file_f1"]
    if mfcc and paired is not None:
        interval = paired_f1_difference(paired.truth, paired.cnn_decision, best.test_decision,
                                        paired.recording_id, resamples=paired.resamples,
                                        confidence=paired.confidence, seed=paired.seed)
        if interval is not None:
            out["margin_file_f1_ci_low"] = interval.low
            out["margin_file_f1_ci_high"] = interval.high
    if LEVEL_MODEL in results:
        out.update(_figures("level", results[LEVEL_MODEL].metrics))
    return out


def _figures(prefix: str, metrics: Mapping[str, float]) -> dict[str, float]:
    return {f"{prefix}_{name}{suffix}": metrics.get(f"test/{name}{suffix}", math.nan)
            for name in COMPARED for suffix in ("", "_ci_low", "_ci_high")}


# -- the CNN's side: evaluate's outputs ---------------------------------------------------------

def read_eval_metrics(path: Path) -> dict[str, Any] | None:
    """evaluate's metrics as flat ``test/file_f1`` names; None when the file does not exist."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        log.info("%s not found: the comparison leaves the CNN out", path)
        return None
    except json.JSONDecodeError:
        raise DataError(f"{path}: not valid JSON; re-run `dvc repro evaluate`") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object of evaluate metrics")
    return flatten(raw, sep="/")


def read_cnn_decisions(path: Path) -> dict[tuple[str, int], bool] | None:
    """evaluate's test decisions per (recording, k-th clip of it); None when the file is absent.

    The k-th clip of a recording is its k-th row in the split (clips of a recording are
    consecutive rows in clip order), so the key does not depend on how clips are numbered.
    """
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            if "leak_decision" not in (reader.fieldnames or ()):
                raise DataError(f"{path}: no leak_decision column (a predictions table from "
                                "before it was renamed from decision?); re-run `dvc repro "
                                "evaluate`")
            rows = [r for r in reader if r.get("split") == TEST]
    except FileNotFoundError:
        return None
    try:
        per_recording: dict[str, list[tuple[int, bool]]] = {}
        for r in rows:
            per_recording.setdefault(r["recording_id"], []).append(
                (int(r["clip"]), r["leak_decision"] == LEAK_CLASS))
    except (KeyError, ValueError) as exc:
        raise DataError(f"{path}: not evaluate's predictions table ({exc})") from None
    return {(rec, k): decision for rec, clips in per_recording.items()
            for k, (_, decision) in enumerate(sorted(clips))}


def paired_test(test: ClipFeatures, decisions: Mapping[tuple[str, int], bool], source: str,
                ev: EvaluateConfig) -> PairedTest:
    """The CNN's decisions in the test split's clip order; a missing clip is an error."""
    seen: dict[str, int] = {}
    aligned = np.zeros(test.n_files, dtype=bool)
    for i, rec in enumerate(test.recording_id):
        k = seen[rec] = seen.get(rec, -1) + 1
        if (rec, k) not in decisions:
            raise DataError(f"{source}: no test prediction for clip {k} of {rec}; re-run "
                            f"`dvc repro evaluate`")
        aligned[i] = decisions[(rec, k)]
    return PairedTest(test.truth, aligned, test.recording_id, ev.bootstrap_resamples,
                      ev.confidence, ev.seed)


def _timed(run: Callable[..., ModelResult], *args: Any) -> ModelResult:
    """``run(*args)`` with the wall-clock span of its work (the model's MLflow child run)."""
    start = time.time()
    result = run(*args)
    return dataclasses.replace(result, span=(start, time.time()))


def compare_models(paths: Mapping[str, Path], cfg: BaselinesConfig, ev: EvaluateConfig,
                   decision: DecisionConfig, eval_metrics: Mapping[str, Any] | None = None,
                   eval_source: str = "metrics/eval.json",
                   cnn_decisions: Mapping[tuple[str, int], bool] | None = None,
                   decisions_source: str = "reports/predictions.csv") -> BaselineReport:
    """Every model of ``cfg.models`` selected on val, reported on test, and the comparison."""
    splits = {name: read_features(paths[name], cfg.n_mfcc, cfg.summary)
              for name in (TRAIN, VAL, TEST)}
    check_compatible(splits)
    for name, split in splits.items():
        if split.truth.all() or not split.truth.any():
            raise DataError(f"{split.path}: the {name} split needs LEAK and non-LEAK clips")
    cnn = cnn_figures(eval_metrics, splits[TEST].n_files, eval_source)
    paired = (None if cnn_decisions is None
              else paired_test(splits[TEST], cnn_decisions, decisions_source, ev))
    results = {name: _timed(evaluate_model, name, splits, cfg, ev, decision)
               for name in cfg.models}
    return BaselineReport(results, compare(results, cnn, paired))


# -- outputs ------------------------------------------------------------------------------------

def flat_metrics(report: BaselineReport) -> dict[str, Any]:
    """Every figure of the report as ``<model>/test/file_f1``, ``comparison/...`` names."""
    out: dict[str, Any] = {}
    for name, result in report.results.items():
        out.update({f"{name}/{k}": v for k, v in result.metrics.items()})
        out.update({f"{name}/hyperparams/{k}": v for k, v in result.hyper.items()})
    out.update({f"comparison/{k}": v for k, v in report.comparison.items()})
    return out


def plot_records(report: BaselineReport) -> list[dict[str, Any]]:
    """One bar per model (the CNN first when known): test F1 with its interval, ROC-AUC."""
    c = report.comparison
    rows = []
    if "cnn_file_f1" in c:
        rows.append((CNN, c["cnn_file_f1"], c["cnn_file_f1_ci_low"], c["cnn_file_f1_ci_high"],
                     c["cnn_file_roc_auc"]))
    for name, r in report.results.items():
        m = r.metrics
        rows.append((name, m["test/file_f1"], m.get("test/file_f1_ci_low", math.nan),
                     m.get("test/file_f1_ci_high", math.nan), m["test/file_roc_auc"]))
    keys = ("model", "f1", "ci_low", "ci_high", "roc_auc")
    return [json_safe(dict(zip(keys, row, strict=True))) for row in rows]


def write_outputs(report: BaselineReport, *, metrics_path: Path, plots_dir: Path) -> None:
    """`metrics/baselines.json` and the DVC plot file, each written atomically."""
    write_json_atomic(metrics_path, nest(json_safe(flat_metrics(report))))
    write_json_atomic(plots_dir / PLOT_FILE, plot_records(report))
