"""ROC-AUC and average precision of fixed scores under many weightings at once.

A bootstrap reweights the same scored items again and again, so the items are sorted once
(``ScoreOrder``) and every weighting only needs two cumulative sums in that order: the weight
of everything scored at or above each score, and of the positives among it. ROC-AUC and
average precision (the area under the precision-recall curve, as scikit-learn computes it)
follow from those sums read at the end of each group of equal scores (ties count half in
ROC-AUC and form one step of the PR curve, as in scikit-learn).

Weights are laid out (items, weightings) so that each cumulative sum runs down contiguous
memory, and the caller hands them over a few weightings at a time: segment-level figures
reweight some 10^5 segments per resample, and 1000 resamples held at once would not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScoreOrder:
    """Items sorted by descending score: their order, truth, and the ends of tie groups."""

    order: np.ndarray          # (F,) item index, highest score first
    truth: np.ndarray          # (F,) bool in that order
    ends: np.ndarray | None    # (G,) last position of each group of equal scores; None: no ties

    @classmethod
    def of(cls, scores: np.ndarray, truth: np.ndarray) -> ScoreOrder:
        scores = np.asarray(scores)
        order = np.argsort(-scores, kind="stable")
        s = scores[order]
        ends = np.r_[np.flatnonzero(s[1:] != s[:-1]), len(s) - 1]
        return cls(order=order, truth=np.asarray(truth).astype(bool)[order],
                   ends=None if len(ends) == len(s) else ends)


def sorted_ranking(weights: np.ndarray, score_order: ScoreOrder) -> tuple[np.ndarray, np.ndarray]:
    """ROC-AUC and average precision per column of ``weights`` (F, B), rows already in
    ``score_order``; NaN where a column has no positive (both) or no negative (ROC-AUC).

    Integer weights stay integers in the cumulative sums (exact, and int32 halves the memory
    traffic of float64); the products are summed in float64. Every step is one pass over
    (F, B): at 10^5 segments per resample the number of passes is the cost.
    """
    positive = weights * score_order.truth[:, None]
    total = np.cumsum(weights, axis=0, dtype=weights.dtype)     # (F, B) weight at or above
    tp = np.cumsum(positive, axis=0, dtype=weights.dtype)       # (F, B) positives among it
    if score_order.ends is None:                                # every score its own group
        pos, neg = positive, weights - positive
    else:                                                       # one step per tie group
        # np.take: fancy indexing of a 2-D array is several times slower
        total, tp = (np.take(a, score_order.ends, axis=0) for a in (total, tp))
        pos = _steps(tp)
        neg = _steps(total) - pos
    fp = total - tp
    n_pos, n_neg = tp[-1].astype(np.float64), fp[-1].astype(np.float64)
    # a group's positives beat the negatives below it (n_neg - fp) and tie half of its own
    pairs = n_pos * n_neg - _column_dot(pos, fp) + 0.5 * _column_dot(pos, neg)
    roc = _divide(pairs, n_pos * n_neg)
    precision = _precision(tp, total)
    ap = _divide(_column_dot(pos, precision), n_pos)
    return roc, ap


def weighted_ranking(scores: np.ndarray, truth: np.ndarray,
                     weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROC-AUC and average precision per weight row: (F,), (F,), (B, F) -> (B,), (B,).

    Equal scores form one group (ties count half in ROC-AUC, one step in the PR curve), as
    in scikit-learn; a row without positives or negatives gives NaN.
    """
    score_order = ScoreOrder.of(scores, truth)
    w = np.take(np.atleast_2d(np.asarray(weights, dtype=np.float64)).T, score_order.order,
                axis=0)                                                           # (F, B)
    return sorted_ranking(w, score_order)


def _precision(tp: np.ndarray, total: np.ndarray) -> np.ndarray:
    """tp / total, 0 where nothing is at or above (zero-weight items scored highest)."""
    if np.issubdtype(total.dtype, np.integer):     # total 0 means tp 0: 0 / 1, no mask needed
        return tp / np.maximum(total, 1)
    return np.divide(tp, total, out=np.zeros(tp.shape), where=total > 0)


def _steps(cumulative: np.ndarray) -> np.ndarray:
    """The increments of a cumulative sum along axis 0 (its first row included)."""
    out = np.empty_like(cumulative)
    out[0] = cumulative[0]
    np.subtract(cumulative[1:], cumulative[:-1], out=out[1:])
    return out


def _column_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum over rows of ``a * b`` per column, in float64 (int32 products would overflow)."""
    return np.einsum("ij,ij->j", a, b, dtype=np.float64)


def _divide(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full(np.shape(num), np.nan), where=den > 0)
