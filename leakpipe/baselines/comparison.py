"""Stage `baselines`: fit on train, choose hyper-parameters and threshold on val, report on test.

``compare_models`` computes the stage's figures (no I/O besides reading the splits):

1. features of every split (``data.read_features``);
2. per model, the hyper-parameters and threshold chosen on val and the figures on test
   (``leakpipe.baselines.selection``);
3. the CNN's test decisions aligned with the test split (``leakpipe.baselines.cnn_outputs``);
4. the comparison: the CNN's figures from `metrics/eval.json` against the MFCC baseline with
   the highest test F1 (the strongest, so the margin is the CNN's smallest lead), and the
   level-only ROC-AUC.

``write_outputs`` writes `metrics/baselines.json` (names nested at the slashes, as eval.json)
and the DVC bar plot of test F1 with intervals, each atomically.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe.baselines.cnn_outputs import PairedTest, paired_test
from leakpipe.baselines.data import check_compatible, read_features
from leakpipe.baselines.models import FEATURE_SET, MFCC
from leakpipe.baselines.selection import TEST, TRAIN, VAL, ModelResult, evaluate_model
from leakpipe.config import BaselinesConfig, DecisionConfig, EvaluateConfig
from leakpipe.errors import DataError
from leakpipe.evaluate.bootstrap import paired_f1_difference
from leakpipe.files import write_json_atomic
from leakpipe.metric_names import json_safe, nest

CNN = "cnn"
LEVEL_MODEL = "level_logreg"
PLOT_FILE = "comparison.json"
COMPARED = ("clip_f1", "clip_roc_auc")   # figures the comparison shows, with intervals


@dataclass(frozen=True)
class BaselineReport:
    results: dict[str, ModelResult]
    comparison: dict[str, Any]        # flat: best_baseline, cnn_clip_f1, margin_clip_f1, ...


# -- comparison ---------------------------------------------------------------------------------

def cnn_figures(eval_metrics: Mapping[str, Any] | None, test_files: int,
                source: str) -> dict[str, float]:
    """The CNN's compared test figures from evaluate's flat metrics ({} when absent)."""
    if eval_metrics is None:
        return {}
    files = eval_metrics.get("test/clips")
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
        best = max(mfcc, key=lambda r: r.metrics["test/clip_f1"])  # first of equals
        out["best_baseline"] = best.name
        out.update(_figures("baseline", best.metrics))
    if cnn:
        out.update({f"cnn_{k}": v for k, v in cnn.items()})
    if mfcc and cnn:
        out["margin_clip_f1"] = cnn["clip_f1"] - out["baseline_clip_f1"]
    if mfcc and paired is not None:
        interval = paired_f1_difference(paired.truth, paired.cnn_decision, best.test_decision,
                                        paired.recording_id, resamples=paired.resamples,
                                        confidence=paired.confidence, seed=paired.seed)
        if interval is not None:
            out["margin_clip_f1_ci_low"] = interval.low
            out["margin_clip_f1_ci_high"] = interval.high
    if LEVEL_MODEL in results:
        out.update(_figures("level", results[LEVEL_MODEL].metrics))
    return out


def _figures(prefix: str, metrics: Mapping[str, float]) -> dict[str, float]:
    return {f"{prefix}_{name}{suffix}": metrics.get(f"test/{name}{suffix}", math.nan)
            for name in COMPARED for suffix in ("", "_ci_low", "_ci_high")}


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
    """Every figure of the report as ``<model>/test/clip_f1``, ``comparison/...`` names."""
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
    if "cnn_clip_f1" in c:
        rows.append((CNN, c["cnn_clip_f1"], c["cnn_clip_f1_ci_low"], c["cnn_clip_f1_ci_high"],
                     c["cnn_clip_roc_auc"]))
    for name, r in report.results.items():
        m = r.metrics
        rows.append((name, m["test/clip_f1"], m.get("test/clip_f1_ci_low", math.nan),
                     m.get("test/clip_f1_ci_high", math.nan), m["test/clip_roc_auc"]))
    keys = ("model", "f1", "ci_low", "ci_high", "roc_auc")
    return [json_safe(dict(zip(keys, row, strict=True))) for row in rows]


def write_outputs(report: BaselineReport, *, metrics_path: Path, plots_dir: Path) -> None:
    """`metrics/baselines.json` and the DVC plot file, each written atomically."""
    write_json_atomic(metrics_path, nest(json_safe(flat_metrics(report))))
    write_json_atomic(plots_dir / PLOT_FILE, plot_records(report))
