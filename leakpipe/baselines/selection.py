"""Stage `baselines`, one model: fit on train, choose hyper-parameters and threshold on val,
report on test.

Every hyper-parameter combination is fitted on train and scored on val; the threshold of each
is chosen on val by evaluate's own ``select_operating_point`` (a clip score is a file of one
segment, whose ``mean`` rule is the score itself), and the combination with the best criterion
value wins (ties: the higher val ROC-AUC, then the first in grid order). The winner is applied
unchanged to test: evaluate's file-level figures and its bootstrap over test recordings (same
seed and resamples, so every model and the CNN are judged on the same recording draws).
``logger_stats`` is chosen by grouped inner CV instead (``evaluate_stats_model``); the logger's
rules (``min_level``, ``band_min_level``: ``leakpipe.baselines.rules``) fit nothing but their
threshold, on train + val (``evaluate_rule``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from leakpipe.baselines.data import ClipFeatures
from leakpipe.baselines.models import FEATURE_SET, MFCC, hyper_grid, leak_scores, make_model
from leakpipe.baselines.operating_point import choose_on_val
from leakpipe.baselines.recording_figures import recording_figures
from leakpipe.config import BaselinesConfig, DecisionConfig, EvaluateConfig
from leakpipe.config.crossval import RULE_METHODS
from leakpipe.decision.select import OperatingPoint
from leakpipe.decision.voting import decide
from leakpipe.evaluate.bootstrap import bootstrap_intervals
from leakpipe.evaluate.figures import binary_figures, interval_metrics, prefixed, ranking_metrics

log = logging.getLogger(__name__)

TRAIN, VAL, TEST = "train", "val", "test"
STATS_MODEL = "logger_stats"
RULE_MODELS = RULE_METHODS          # the logger's rules (leakpipe.baselines.rules)


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
    out = prefixed(f"{name}/clip", binary_figures(split.truth, decision, scores))
    if bootstrap:
        intervals = bootstrap_intervals(split.truth, decision, scores, split.recording_id,
                                        resamples=ev.bootstrap_resamples,
                                        confidence=ev.confidence, seed=ev.seed)
        out.update(interval_metrics(f"{name}/clip", intervals))
    out[f"{name}/clips"] = float(split.n_files)
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
    scores = {VAL: fit.val_scores,
              TEST: ls.leak_probability(fit.net, tables[TEST].stats[:, fit.used])}   # (R,)
    return _per_recording(STATS_MODEL, {"C": fit.c, "forms": cfg.logger_stats.forms},
                          fit.point, fit.grid, tables, scores, splits, ev)


def evaluate_rule(name: str, splits: Mapping[str, ClipFeatures], cfg: BaselinesConfig,
                  ev: EvaluateConfig, decision: DecisionConfig) -> ModelResult:
    """A logger's rule (``baselines.rules``): its statistic (the band from train) and its
    threshold from the train and val recordings pooled, nothing else fitted; decided per
    recording as logger_stats is, each clip carrying its recording's score."""
    from leakpipe.baselines import logger_stats as ls
    from leakpipe.baselines.rules import fit_rule

    tables = {split: ls.read_recordings(splits[split].path) for split in (TRAIN, VAL, TEST)}
    fit = fit_rule(name, tables[TRAIN], tables[VAL], cfg.rules.percentile, ev, decision)
    hyper = {"statistic": fit.statistic, "percentile": cfg.rules.percentile}
    return _per_recording(name, hyper, fit.point, [{**hyper, "threshold": fit.point.threshold}],
                          tables, {s: fit.scores(tables[s]) for s in (VAL, TEST)}, splits, ev)


def _per_recording(name: str, hyper: dict[str, Any], point: OperatingPoint,
                   rows: list[dict[str, Any]], tables: Mapping[str, Any],
                   scores: Mapping[str, np.ndarray], splits: Mapping[str, ClipFeatures],
                   ev: EvaluateConfig) -> ModelResult:
    """A model of one score per recording: its recording figures on val and test, and its
    clip figures with each clip carrying its recording's score."""
    metrics = {"eval/threshold": point.threshold, "eval/criterion_value": point.value,
               "eval/target_met": float(point.met)}
    for split_name, bootstrap in ((VAL, False), (TEST, True)):
        table, split = tables[split_name], splits[split_name]
        decided = decide(scores[split_name], point.threshold)[0]
        metrics.update(recording_figures(split_name, table.truth, decided, scores[split_name],
                                         table.group))
        clip = scores[split_name][table.clip_recording]                       # (F,)
        decision_clip = decide(clip, point.threshold)[0]
        metrics.update(split_figures(split_name, split, clip, decision_clip, ev,
                                     bootstrap=bootstrap))
    return ModelResult(name, hyper, point, metrics, rows, np.asarray(decision_clip, dtype=bool))


def evaluate_model(name: str, splits: Mapping[str, ClipFeatures], cfg: BaselinesConfig,
                   ev: EvaluateConfig, decision: DecisionConfig) -> ModelResult:
    """Select on val, then apply the chosen model and threshold unchanged to test."""
    if name == STATS_MODEL:
        return evaluate_stats_model(splits, cfg, ev, decision)
    if name in RULE_MODELS:
        return evaluate_rule(name, splits, cfg, ev, decision)
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
