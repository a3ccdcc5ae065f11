"""evaluate for a `logger_stats` detector: fit on train, choose on val, report on test.

The statistics model is fitted on the train recordings (``C`` chosen on val, as in
`crossval`), its threshold is chosen on the val recordings by evaluate's criterion and grid,
the Platt calibration that makes ``leak_prob`` a probability is fitted on the val recordings,
and test is scored once with all of it unchanged. Every figure is per recording, the unit a
utility acts on; the intervals resample sites (a site drawn k times brings all of its
recordings k times), as `crossval`'s do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe.baselines.logger_stats import fit_and_select, leak_probability, read_recordings
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
from leakpipe.decision.calibration import fit_platt
from leakpipe.decision.voting import decide
from leakpipe.stats_detector import StatsDetector

log = logging.getLogger(__name__)

TRAIN, VAL, TEST = "train", "val", "test"


@dataclass(frozen=True)
class StatsEvaluation:
    detector: StatsDetector
    metrics: dict[str, float]                 # val/recording_*, test/recording_* (+ intervals)
    rows: list[dict[str, Any]]                # a row per val / test recording


def evaluate_stats_detector(paths: Mapping[str, Path], baselines: BaselinesConfig,
                            ev: EvaluateConfig, decision: DecisionConfig,
                            quality: QualityConfig) -> StatsEvaluation:
    """``paths``: train / val / test split files that hold recording statistics."""
    tables = {name: read_recordings(paths[name]) for name in (TRAIN, VAL, TEST)}
    fit = fit_and_select(tables[TRAIN], tables[VAL], baselines.logger_stats, ev, decision)
    with open_split(paths[TRAIN]) as split:
        stats_cfg = from_mapping(RecordingStatsConfig, split.stats_config, "stats",
                                 str(paths[TRAIN]))
    val = tables[VAL]
    calibration = fit_platt(fit.val_scores, val.truth)
    metrics: dict[str, float] = {"eval/threshold": fit.point.threshold,
                                 "eval/criterion_value": fit.point.value,
                                 "eval/target_met": float(fit.point.met),
                                 "eval/C": fit.c}
    rows = []
    for name in (VAL, TEST):
        table = tables[name]
        scores = leak_probability(fit.net, table.stats[:, fit.used])           # (R,)
        decided = decide(scores, fit.point.threshold)[0]
        metrics.update(recording_figures(name, table.truth, decided, scores, table.group,
                                         intervals=ev if name == TEST else None,
                                         counts=True))
        probs = calibration.prob(scores)
        rows += [{"split": name, "recording_id": rid, "group": grp, "truth": int(t),
                  "score": f"{s:.6g}", "leak_prob": f"{p:.4f}",
                  "leak_decision": "LEAK" if d else "NOLEAK"}
                 for rid, grp, t, s, p, d in zip(table.recording_id, table.group, table.truth,
                                                 scores, probs, decided, strict=True)]
    detector = StatsDetector(net=fit.net, stats=stats_cfg, threshold=fit.point.threshold,
                             calibration=calibration, quality=quality,
                             metrics={k: v for k, v in metrics.items()
                                      if k.startswith(("test/recording_", "eval/"))})
    log.info("logger_stats detector: C %g, threshold %g (val); test recording ROC-AUC %.3f, "
             "F1 %.3f over %d recordings", fit.c, fit.point.threshold,
             metrics["test/recording_roc_auc"], metrics["test/recording_f1"],
             int(metrics["test/recordings"]))
    return StatsEvaluation(detector, metrics, rows)


__all__ = ["StatsEvaluation", "evaluate_stats_detector"]
