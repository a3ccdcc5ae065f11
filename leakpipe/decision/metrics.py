"""Confusion-matrix metrics for many thresholds at once, and the collapse diagnosis.

``binary_metrics(y_true (N,), decisions (K, N))`` returns (K,) arrays; a ratio with a zero
denominator is 0 (scikit-learn's ``zero_division=0``). ``diagnose`` explains in one line why a
run's F1 is 0 or its predictions collapsed (a hard-coded class index once read F1 0 for
weeks; a collapsed model calls everything one class), instead of a silent 0. ``roc_auc`` ranks
scores; ``wilson_interval`` is the interval of a share of recordings (the domain checks' shifted
shares).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

COLLAPSE_SHARE = 0.98   # a class predicted for this share of segments (but not that common)
METRIC_NAMES = ("accuracy", "precision", "recall", "specificity", "f1")


@dataclass(frozen=True)
class BinaryMetrics:
    """Counts and rates per threshold, each of shape (K,)."""

    tp: np.ndarray
    fp: np.ndarray
    tn: np.ndarray
    fn: np.ndarray

    @property
    def accuracy(self) -> np.ndarray:
        return _ratio(self.tp + self.tn, self.tp + self.fp + self.tn + self.fn)

    @property
    def precision(self) -> np.ndarray:
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> np.ndarray:
        """Sensitivity."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def specificity(self) -> np.ndarray:
        return _ratio(self.tn, self.tn + self.fp)

    @property
    def f1(self) -> np.ndarray:
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    def at(self, index: int) -> dict[str, float]:
        """Every rate at one threshold index, as plain floats."""
        return {name: float(getattr(self, name)[index]) for name in METRIC_NAMES}


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def binary_metrics(y_true: np.ndarray, decisions: np.ndarray) -> BinaryMetrics:
    """y_true (N,) 0/1 and decisions (K, N) or (N,) booleans -> metrics of shape (K,)."""
    truth = np.asarray(y_true).astype(bool)[None, :]                # (1, N)
    pred = np.atleast_2d(np.asarray(decisions).astype(bool))        # (K, N)
    tp = (pred & truth).sum(axis=1)
    fp = (pred & ~truth).sum(axis=1)
    fn = (~pred & truth).sum(axis=1)
    return BinaryMetrics(tp=tp, fp=fp, tn=truth.shape[1] - tp - fp - fn, fn=fn)


def best_index(values: np.ndarray) -> int:
    """Index of the maximum; among ties, the middle one (the centre of a flat optimum)."""
    values = np.asarray(values, dtype=np.float64)
    ties = np.flatnonzero(values == np.nanmax(values)) if np.isfinite(values).any() else [0]
    return int(ties[(len(ties) - 1) // 2])


def diagnose(y_true: np.ndarray, y_pred: np.ndarray, scores: np.ndarray | None = None,
             threshold: float | None = None) -> str | None:
    """One line explaining an F1 of 0 or a one-class prediction; None when all is well."""
    truth, pred = np.asarray(y_true).astype(bool), np.asarray(y_pred).astype(bool)
    n, positives, predicted = truth.size, int(truth.sum()), int(pred.sum())
    if positives == 0:
        return (f"no positives present: none of the {n} samples is LEAK, F1 is 0 by definition "
                "(check the leak index and that the split holds leaks)")
    if predicted == 0:
        return _no_positives_predicted(n, positives, scores, threshold)
    if predicted == n:
        return (f"collapse: all {n} samples predicted LEAK ({n - positives} false positives; "
                "check leak_weight_boost, leak_oversample_factor and leak_aux_weight)")
    if not (pred & truth).any():
        return f"F1 = 0: {predicted} samples predicted LEAK, none of them is one"
    return None


def _no_positives_predicted(n: int, positives: int, scores: np.ndarray | None,
                            threshold: float | None) -> str:
    line = f"no positives predicted: all {n} samples predicted NOLEAK ({positives} leaks missed)"
    if scores is not None and threshold is not None and np.size(scores):
        top = float(np.max(scores))
        if threshold > top:
            line += (f"; threshold {threshold:g} is above the probability mass "
                     f"(max score {top:.3g}, median {float(np.median(scores)):.3g})")
    return line


def dominant_class(pred_counts: Sequence[int], true_counts: Sequence[int],
                   class_names: Sequence[str], share: float = COLLAPSE_SHARE) -> str | None:
    """'collapse: 99.5 % of segments predicted LEAK (true share 43.0 %)' or None."""
    pred = np.asarray(pred_counts, dtype=np.float64)
    true = np.asarray(true_counts, dtype=np.float64)
    if pred.sum() == 0 or true.sum() == 0:
        return None
    top = int(np.argmax(pred))
    pred_share, true_share = pred[top] / pred.sum(), true[top] / true.sum()
    if pred_share < share or true_share >= share:
        return None
    return (f"collapse: {100 * pred_share:.1f} % of segments predicted {class_names[top]} "
            f"(true share {100 * true_share:.1f} %)")


def roc_auc(truth: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for the boolean ``truth`` (ties count half, as
    in scikit-learn); NaN when only one class is present."""
    truth = np.asarray(truth, dtype=bool)
    n_pos, n_neg = int(truth.sum()), int((~truth).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(order), dtype=np.float64)
    sorted_scores = np.asarray(scores)[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(order)]
    for a, b in zip(starts, ends, strict=True):          # tied scores share their mean rank
        ranks[order[a:b]] = (a + b + 1) / 2.0
    return float((ranks[truth].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def wilson_interval(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a proportion k / n (95 % by default); (nan, nan) for n = 0."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
