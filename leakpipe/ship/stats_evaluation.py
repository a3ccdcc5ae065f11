"""evaluate for a `logger_stats` detector: fit on train + val, choose by inner CV, report on
test.

As in `crossval` (``leakpipe.baselines.logger_stats.fit_and_select``): ``C`` is chosen by
grouped inner CV over the train and val recordings pooled, the model is refitted on them, the
threshold (evaluate's criterion and grid) and the Platt calibration that makes ``leak_prob`` a
probability are fitted on their out-of-fold scores, and test is scored once with all of it
unchanged; the val figures are of the val recordings' out-of-fold scores. The detector keeps,
per statistic it reads, the share of the recordings the net was fitted on (train + val pooled;
train alone with ``inner_folds: 1``) on which it was missing (``fitted_missing_share``): its
domain check (``decision.stats_domain``) does not call a recording ``shifted`` for missing a
band that many of those recordings lacked too. Every figure is per recording, the unit a
utility acts on; the intervals resample sites (a site drawn k times brings all of its
recordings k times), as `crossval`'s do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.baselines.logger_stats import (
    RecordingTable,
    fit_and_select,
    held_out_distances,
    leak_probability,
    read_recordings,
)
from leakpipe.baselines.recording_figures import recording_figures
from leakpipe.config import (
    BaselinesConfig,
    DecisionConfig,
    EvaluateConfig,
    QualityConfig,
    RecordingStatsConfig,
    from_mapping,
)
from leakpipe.data.reader import open_split
from leakpipe.decision.calibration import Calibration, fit_platt
from leakpipe.decision.stats_domain import missing_shares
from leakpipe.decision.verdict import call_fields
from leakpipe.decision.voting import decide
from leakpipe.predict.stats import RAW_DECIMALS
from leakpipe.stats_detector import StatsDetector

log = logging.getLogger(__name__)

TRAIN, VAL, TEST = "train", "val", "test"


@dataclass(frozen=True)
class StatsEvaluation:
    detector: StatsDetector
    metrics: dict[str, float]                 # val/recording_*, test/recording_* (+ intervals)
    rows: list[dict[str, Any]]                # a row per val / test recording
    scores: dict[str, np.ndarray]             # val (out-of-fold) and test: (R,) P(LEAK)


def evaluate_stats_detector(paths: Mapping[str, Path], baselines: BaselinesConfig,
                            ev: EvaluateConfig, decision: DecisionConfig,
                            quality: QualityConfig) -> StatsEvaluation:
    """``paths``: train / val / test split files that hold recording statistics."""
    tables = {name: read_recordings(paths[name]) for name in (TRAIN, VAL, TEST)}
    fit = fit_and_select(tables[TRAIN], tables[VAL], baselines.logger_stats, ev, decision)
    with open_split(paths[TRAIN]) as split:
        stats_cfg = from_mapping(RecordingStatsConfig, split.stats_config, "stats",
                                 str(paths[TRAIN]))
    calibration = fit_platt(fit.pooled_scores, fit.pooled_truth)   # out-of-fold, train + val
    metrics: dict[str, float] = {"eval/threshold": fit.point.threshold,
                                 "eval/criterion_value": fit.point.value,
                                 "eval/target_met": float(fit.point.met),
                                 "eval/C": fit.c}
    rows = []
    scores = {VAL: fit.val_scores,                      # out-of-fold: the model refits on val
              TEST: leak_probability(fit.net, tables[TEST].stats[:, fit.used])}   # (R,)
    for name in (VAL, TEST):
        figures, split_rows = split_report(name, tables[name], scores[name],
                                           fit.point.threshold, calibration, ev)
        metrics.update(figures)
        rows += split_rows
    detector = StatsDetector(net=fit.net, stats=stats_cfg, threshold=fit.point.threshold,
                             calibration=calibration, quality=quality,
                             missing_share=fitted_missing_share(
                                 tables[TRAIN], tables[VAL], fit.used,
                                 baselines.logger_stats.inner_folds),
                             val_distances=fitted_distances(
                                 tables[TRAIN], tables[VAL], fit.used,
                                 baselines.logger_stats.inner_folds),
                             metrics={k: v for k, v in metrics.items()
                                      if k.startswith(("test/recording_", "eval/"))})
    log.info("logger_stats detector: C %g, threshold %g (inner CV); test recording ROC-AUC %.3f, "
             "F1 %.3f over %d recordings", fit.c, fit.point.threshold,
             metrics["test/recording_roc_auc"], metrics["test/recording_f1"],
             int(metrics["test/recordings"]))
    return StatsEvaluation(detector, metrics, rows, scores)


def fitted_missing_share(train: RecordingTable, val: RecordingTable, used: np.ndarray,
                         inner_folds: int) -> np.ndarray:
    """(S,) the share of the recordings ``fit_and_select`` fitted the net on (train + val
    pooled; train alone when ``inner_folds`` is 1) on which each used statistic is missing."""
    fitted = [train] if inner_folds == 1 else [train, val]
    return missing_shares(np.concatenate([t.stats[:, used] for t in fitted]))


def fitted_distances(train: RecordingTable, val: RecordingTable, used: np.ndarray,
                     inner_folds: int) -> np.ndarray:
    """(V,) the held-out domain distances of the recordings the net was fitted on (as
    ``fitted_missing_share`` takes them), each site's against the other sites: the set domain
    check's reference (``StatsDetector.val_distances``); a recording with no statistic present
    has none."""
    fitted = [train] if inner_folds == 1 else [train, val]
    d = held_out_distances(np.concatenate([t.stats[:, used] for t in fitted]),
                           np.concatenate([np.asarray(t.group).astype(str) for t in fitted]))
    return np.sort(d[np.isfinite(d)])


def split_report(name: str, table: RecordingTable, scores: np.ndarray, threshold: float,
                 calibration: Calibration,
                 ev: EvaluateConfig) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """One split's recording figures (test's with site-bootstrap intervals) and its rows of
    reports/shipped_predictions.csv, for (R,) recording scores decided at ``threshold``.

    A row has `leakpipe predict`'s names and scales: ``leak_prob`` (calibrated) and
    ``threshold`` (the operating point through the same calibration) as predict shows them,
    ``decision`` (taken on the raw score, so LEAK exactly when the shown ``leak_prob`` reaches
    the shown ``threshold``) and ``raw_score`` (the score the call is taken on)."""
    decided = decide(scores, threshold)[0]
    figures = recording_figures(name, table.truth, decided, scores, table.group,
                                intervals=ev if name == TEST else None, counts=True)
    probs = calibration.prob(scores)
    prob_threshold = float(calibration.prob(threshold))
    rows = [{"split": name, "recording_id": rid, "group": grp, "truth": int(t),
             **call_fields(float(s), threshold, float(p), prob_threshold),
             "raw_score": round(float(s), RAW_DECIMALS)}
            for rid, grp, t, s, p in zip(table.recording_id, table.group, table.truth,
                                         scores, probs, strict=True)]
    return figures, rows


__all__ = ["StatsEvaluation", "evaluate_stats_detector", "fitted_distances", "fitted_missing_share",
           "split_report"]
