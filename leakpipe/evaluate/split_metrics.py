"""Every figure of one evaluated split, each with its bootstrap interval.

Three families, all named as `metrics/eval.json` and MLflow show them:

- ``<split>/file_*``: the file decisions of the operating point;
- ``<split>/seg_*``: every short segment at ``segment_threshold``, each inheriting its file's
  label;
- ``<split>/class/<NAME>/{file,seg}_*`` (multi-class models): one class against the rest, from
  the argmax of the mean class probabilities per file or of each segment.

Each family gets ``_ci_low`` / ``_ci_high`` from ``bootstrap.bootstrap_intervals`` with the
same recording draws (same seed, same recordings): a segment belongs to its file's recording,
so a resample that draws a recording twice counts its files and its segments twice. The point
figures alone would hide how few recordings stand behind them (a split of 100 recordings
gives seg_* from 10^5 segments that are far from independent); resampling recordings, not
segments, keeps the segment intervals as wide as the evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from leakpipe.evaluate.bootstrap import Interval, bootstrap_intervals
from leakpipe.evaluate.figures import (
    FileTable,
    binary_figures,
    class_metrics,
    interval_metrics,
    prefixed,
)

CLASS_INTERVAL_NAMES = ("precision", "recall", "f1")   # the per-class figures besides support


@dataclass(frozen=True)
class Resampling:
    """How intervals are drawn: `evaluate.bootstrap_resamples`, `confidence`, `seed`."""

    resamples: int
    confidence: float
    seed: int


def level_figures(prefix: str, truth: np.ndarray, decision: np.ndarray, scores: np.ndarray,
                  recording_ids: np.ndarray, resampling: Resampling | None) -> dict[str, float]:
    """Binary figures of one set of items (files or segments) and, with ``resampling``, their
    intervals: ``test/seg_f1``, ``test/seg_f1_ci_low``, ..."""
    out = prefixed(prefix, binary_figures(truth, decision, scores))
    if resampling is not None:
        out.update(interval_metrics(prefix, _intervals(truth, decision, scores, recording_ids,
                                                       resampling)))
    return out


def class_level_figures(split: str, level: str, labels: np.ndarray, pred: np.ndarray,
                        class_names: Sequence[str], recording_ids: np.ndarray,
                        resampling: Resampling | None) -> dict[str, float]:
    """Per-class precision, recall, F1, support and, with ``resampling``, the intervals of the
    first three (one class against the rest; there is no score to rank, so no AUCs)."""
    out = class_metrics(split, level, labels, pred, class_names)
    if resampling is None:
        return out
    for index, name in enumerate(class_names):
        intervals = _intervals(labels == index, pred == index, None, recording_ids, resampling)
        out.update(interval_metrics(
            f"{split}/class/{name}/{level}",
            {k: v for k, v in intervals.items() if k in CLASS_INTERVAL_NAMES}))
    return out


def segment_recordings(table: FileTable, per_file: int) -> np.ndarray:
    """(F * per_file,) recording index of every segment, in segment order: each segment
    belongs to its file's recording (integer codes: ``np.unique`` on 10^5 strings is slow)."""
    _, codes = np.unique(table.recording_id, return_inverse=True)
    return np.repeat(codes.reshape(-1), per_file)


def split_figures(name: str, table: FileTable, decision: np.ndarray, file_score: np.ndarray,
                  seg_probs: np.ndarray, segment_threshold: float,
                  resampling: Resampling | None) -> dict[str, float]:
    """File- and segment-level figures of one split (with intervals under ``resampling``)."""
    out = level_figures(f"{name}/clip", table.truth, decision, file_score, table.recording_id,
                        resampling)
    per_file = seg_probs[0].size
    probs = seg_probs.reshape(-1)                                    # (F * L * S,)
    out.update(level_figures(f"{name}/seg", np.repeat(table.truth, per_file),
                             probs >= segment_threshold, probs,
                             segment_recordings(table, per_file), resampling))
    return out


def class_figures(name: str, table: FileTable, class_probs: np.ndarray, seg_pred: np.ndarray,
                  per_file: int, resampling: Resampling | None) -> dict[str, float]:
    """Per-class figures of one split: files by the argmax of their mean class probabilities,
    segments by their own argmax."""
    names = table.class_names
    out = class_level_figures(name, "clip", table.label, class_probs.argmax(axis=1), names,
                              table.recording_id, resampling)
    out.update(class_level_figures(name, "seg", np.repeat(table.label, per_file), seg_pred,
                                   names, segment_recordings(table, per_file), resampling))
    return out


def _intervals(truth: np.ndarray, decision: np.ndarray, scores: np.ndarray | None,
               recording_ids: np.ndarray, resampling: Resampling) -> dict[str, Interval]:
    return bootstrap_intervals(truth, decision, scores, recording_ids,
                               resamples=resampling.resamples,
                               confidence=resampling.confidence, seed=resampling.seed)
