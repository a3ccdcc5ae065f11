"""evaluate for a `fused` detector: evaluate's CNN and a logger_stats detector stacked on the
val recordings, reported on test.

- The statistics part is fitted as `ship` fits a logger_stats detector
  (``stats_evaluation.evaluate_stats_detector``); its val recordings' probabilities are
  out-of-fold (no model that scored one saw it).
- The CNN part is evaluate's detector (`models/detector.pt`) as it is. Its recording
  probability is the mean of the recording's clips' rule scores, the clips scored through the
  project's scoring path (``evaluate.recording_scores``: the split's file-order batches, as
  evaluate scores them; `promote` scores a fused detector's CNN part with the same function).
- The stacker (``cv.recording_level.fit_stacker``, ``detector.fusion_C``: the logistic
  regression of grouped CV's `fused` method) is fitted on the val recordings' two
  probabilities; the threshold is chosen on its val probabilities by evaluate's criterion and
  grid and the Platt calibration fitted there. Only then is the test split's CNN part scored,
  and test is decided once with all of it unchanged.

Every figure is per recording, as the logger_stats kind's (``stats_evaluation.split_report``),
and the parts' own test recording ROC-AUC comes beside them: what the stacking added.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.baselines.logger_stats import RecordingTable, read_recordings
from leakpipe.baselines.operating_point import choose_on_val
from leakpipe.config import BaselinesConfig, DecisionConfig, EvaluateConfig, QualityConfig
from leakpipe.constants import PLACEMENT_STREAM
from leakpipe.cv.recording_level import fit_stacker
from leakpipe.data.reader import open_split
from leakpipe.decision.calibration import fit_platt
from leakpipe.decision.stacking import logit
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.evaluate.figures import ranking_metrics
from leakpipe.evaluate.recording_scores import cnn_recording_scores
from leakpipe.runtime import Runtime
from leakpipe.ship.stats_evaluation import evaluate_stats_detector, split_report
from leakpipe.stats_detector import FUSED_PARTS, FusedDetector

log = logging.getLogger(__name__)

VAL, TEST = "val", "test"


@dataclass(frozen=True)
class FusedEvaluation:
    detector: FusedDetector
    metrics: dict[str, float]                 # val/recording_*, test/recording_* (+ intervals)
    rows: list[dict[str, Any]]                # a row per val / test recording


def cnn_recording_probs(cnn: Detector, path: Path, table: RecordingTable,
                        runtime: Runtime) -> np.ndarray:
    """(R,) the CNN part's probability of each recording of the split ``path``: the mean of
    its clips' rule scores (``evaluate.recording_scores``, as `promote` scores the part)."""
    with open_split(path) as split:
        if split.class_names != cnn.data_class_names or split.features != cnn.features:
            raise DataError(f"{path}: its classes or feature config differ from the CNN "
                            "detector's (trained on other splits); re-run evaluate")
    if cnn.batch_limits is None:
        raise DataError("the CNN detector was written before detector files held their "
                        "scoring rules; re-run evaluate")
    return cnn_recording_scores(cnn, path, table.clip_recording, len(table),
                                placement=PLACEMENT_STREAM, limits=cnn.batch_limits,
                                runtime=runtime)


def evaluate_fused_detector(paths: Mapping[str, Path], cnn: Detector, *,
                            baselines: BaselinesConfig, ev: EvaluateConfig,
                            decision: DecisionConfig, fusion_c: float, quality: QualityConfig,
                            runtime: Runtime) -> FusedEvaluation:
    """``paths``: train / val / test split files that hold recording statistics; ``cnn``:
    evaluate's detector, trained on the same train split."""
    stats = evaluate_stats_detector(paths, baselines, ev, decision, quality)
    tables = {name: read_recordings(paths[name]) for name in (VAL, TEST)}
    truth = tables[VAL].truth
    parts = {VAL: np.stack([cnn_recording_probs(cnn, paths[VAL], tables[VAL], runtime),
                            stats.scores[VAL]], axis=1)}                       # (R_val, 2)
    stacker = fit_stacker(list(parts[VAL].T), truth, fusion_c, FUSED_PARTS)
    val_scores = stacker.prob(logit(parts[VAL]))                               # (R_val,)
    point = choose_on_val(val_scores, truth, ev, decision)
    calibration = fit_platt(val_scores, truth)
    parts[TEST] = np.stack([cnn_recording_probs(cnn, paths[TEST], tables[TEST], runtime),
                            stats.scores[TEST]], axis=1)   # scored after every choice
    scores = {VAL: val_scores, TEST: stacker.prob(logit(parts[TEST]))}
    metrics: dict[str, float] = {
        "eval/threshold": point.threshold, "eval/criterion_value": point.value,
        "eval/target_met": float(point.met), "eval/C": stats.metrics["eval/C"],
        "eval/stacker_bias": stacker.bias,
        **{f"eval/stacker_{n}": w for n, w in zip(stacker.names, stacker.weights, strict=True)},
        **{f"test/{n}_recording_roc_auc": ranking_metrics(tables[TEST].truth,
                                                          parts[TEST][:, i])["roc_auc"]
           for i, n in enumerate(FUSED_PARTS)}}
    rows: list[dict[str, Any]] = []
    for name in (VAL, TEST):
        figures, split_rows = split_report(name, tables[name], scores[name], point.threshold,
                                           calibration, ev)
        metrics.update(figures)
        rows += split_rows
    detector = FusedDetector(cnn=cnn, logger_stats=stats.detector, stacker=stacker,
                             threshold=point.threshold, calibration=calibration,
                             metrics={k: v for k, v in metrics.items()
                                      if k.startswith(("test/recording_", "eval/"))})
    log.info("fused detector: stacker %s, threshold %g (val); test recording ROC-AUC %.3f "
             "(cnn %.3f, logger_stats %.3f), F1 %.3f over %d recordings",
             stacker.to_dict(), point.threshold, metrics["test/recording_roc_auc"],
             metrics["test/cnn_recording_roc_auc"], metrics["test/logger_stats_recording_roc_auc"],
             metrics["test/recording_f1"], int(metrics["test/recordings"]))
    return FusedEvaluation(detector, metrics, rows)


__all__ = ["FusedEvaluation", "cnn_recording_probs", "evaluate_fused_detector"]
