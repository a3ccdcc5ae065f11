"""Figures of one evaluated split: file- and segment-level metrics, per-class metrics, rows.

Names are hierarchical and shared by `metrics/eval.json` and MLflow: ``test/clip_f1``,
``test/clip_f1_ci_low``, ``test/seg_roc_auc``, ``test/class/LEAK/clip_recall``, ... Rates come
from ``binary_metrics`` (recall is the sensitivity); ROC-AUC and PR-AUC (average precision) from
scikit-learn, NaN when the split holds only one of LEAK / not LEAK.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, precision_recall_fscore_support, roc_auc_score

from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.metrics import binary_metrics
from leakpipe.decision.voting import long_segment_probs
from leakpipe.evaluate.bootstrap import Interval

COUNT_NAMES = ("tp", "fp", "tn", "fn")


@dataclass(frozen=True)
class FileTable:
    """Per-file facts of a split, in file order."""

    recording_id: np.ndarray    # (F,) str
    clip: np.ndarray            # (F,) int clip index within its recording
    group: np.ndarray           # (F,) str
    label: np.ndarray           # (F,) int task label
    class_names: tuple[str, ...]
    leak_index: int

    @property
    def truth(self) -> np.ndarray:
        return self.label == self.leak_index                          # (F,) bool


def ranking_metrics(truth: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """ROC-AUC and PR-AUC (average precision); NaN when only one class is present."""
    truth = np.asarray(truth).astype(bool)
    if truth.all() or not truth.any():
        return {"roc_auc": float("nan"), "pr_auc": float("nan")}
    return {"roc_auc": float(roc_auc_score(truth, scores)),
            "pr_auc": float(average_precision_score(truth, scores))}


def binary_figures(truth: np.ndarray, decision: np.ndarray,
                   scores: np.ndarray) -> dict[str, float]:
    """Rates, confusion counts and ranking metrics of one set of decisions."""
    counts = binary_metrics(truth, decision)
    out = counts.at(0)
    out.update({name: float(getattr(counts, name)[0]) for name in COUNT_NAMES})
    out.update(ranking_metrics(truth, scores))
    return out


def per_class_figures(labels: np.ndarray, pred: np.ndarray,
                      class_names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Precision, recall, F1 and support per class (scikit-learn, zero_division 0)."""
    precision, recall, f1, support = precision_recall_fscore_support(
        labels, pred, labels=np.arange(len(class_names)), zero_division=0)
    return {name: {"precision": float(precision[i]), "recall": float(recall[i]),
                   "f1": float(f1[i]), "support": float(support[i])}
            for i, name in enumerate(class_names)}


def frac_long_over(seg_probs: np.ndarray, threshold: float) -> np.ndarray:
    """(F, L, S) -> (F,): share of long segments whose probability reaches ``threshold``."""
    return (long_segment_probs(seg_probs) >= threshold).mean(axis=-1)


def prefixed(prefix: str, figures: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}_{name}": value for name, value in figures.items()}


def interval_metrics(prefix: str, intervals: dict[str, Interval]) -> dict[str, float]:
    """{'f1': Interval} -> {'test/clip_f1_ci_low': ., 'test/clip_f1_ci_high': .}."""
    out = {}
    for name, interval in intervals.items():
        out[f"{prefix}_{name}_ci_low"] = interval.low
        out[f"{prefix}_{name}_ci_high"] = interval.high
    return out


def class_metrics(split: str, level: str, labels: np.ndarray, pred: np.ndarray,
                  class_names: Sequence[str]) -> dict[str, float]:
    """Per-class figures as flat names: ``test/class/LEAK/clip_f1``."""
    out = {}
    for name, figures in per_class_figures(labels, pred, class_names).items():
        out.update({f"{split}/class/{name}/{level}_{k}": v for k, v in figures.items()})
    return out


def prediction_rows(split: str, table: FileTable, scores: np.ndarray, probs: np.ndarray,
                    frac: np.ndarray, decision: np.ndarray,
                    class_pred: np.ndarray) -> list[dict[str, Any]]:
    """One row per clip: the recording, its truth and the decision with its evidence.

    ``leak_score`` is the voting rule's raw score (the scale of the threshold and of the ROC /
    PR plot files), ``leak_prob`` the same clip's calibrated probability (``probs``: what
    `leakpipe predict` and the served model call ``leak_prob``), so one name means one thing
    in every table leakpipe writes.

    Two answers that can disagree, named so that they do not read as a contradiction:
    ``leak_decision`` is the detector's (the voting rule's score against the threshold: what
    every figure and `leakpipe predict` decide) and ``top_class`` the class head's argmax of
    the clip's mean class probabilities, which may name NORMAL for a clip the vote calls LEAK.
    """
    names = table.class_names
    return [{"split": split, "recording_id": str(table.recording_id[i]),
             "clip": int(table.clip[i]), "group": str(table.group[i]),
             "label": names[table.label[i]], "leak": int(table.truth[i]),
             "leak_score": round(float(scores[i]), 6), "leak_prob": round(float(probs[i]), 6),
             "frac_long_over": round(float(frac[i]), 6),
             "leak_decision": DECISION_NAMES[int(decision[i])],
             "top_class": names[class_pred[i]]}
            for i in range(len(scores))]
