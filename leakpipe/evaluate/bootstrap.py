"""Bootstrap confidence intervals of the file-level figures, resampling recordings.

Clips of one recording are not independent (two clips of the same pipe sound alike), so the
unit resampled is the recording: each resample draws recordings with replacement and every clip
of a recording drawn k times gets weight k. All resamples are evaluated together as a weight
matrix (B, F): confusion counts are one matrix product, ROC-AUC and average precision (the area
under the precision-recall curve, as scikit-learn computes it) one sort of the fixed scores plus
cumulative sums per resample. Intervals are percentile intervals; a figure that is undefined in
a resample (no leak drawn) is left out of its percentiles.

Rates (accuracy, precision, recall, specificity) get Wilson score intervals instead: a
percentile bootstrap of a rate at 0 or 1 (no false positive among the negatives) collapses to a
point, which claims certainty that 48 negatives cannot give. The Wilson interval counts each
recording of the rate's denominator once (the observed rate, over the distinct recordings its
clips come from): clips of one recording are not independent, and counting recordings is the
cautious end of that dependence.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from leakpipe.decision.metrics import METRIC_NAMES, BinaryMetrics

RANKING_NAMES = ("roc_auc", "pr_auc")
RATE_NAMES = ("accuracy", "precision", "recall", "specificity")   # Wilson intervals
RESAMPLES_PER_PASS = 256   # weight rows held at once: bounds memory to 256 x files floats


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


def recording_weights(recording_ids: np.ndarray, resamples: int,
                      rng: np.random.Generator) -> np.ndarray:
    """(F,) recording id per file -> (B, F) clip weights of ``resamples`` recording draws."""
    _, inverse = np.unique(np.asarray(recording_ids), return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.size else 0
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples)  # (B, R)
    return counts[:, inverse].astype(np.float64)                       # (B, F)


def weighted_counts(truth: np.ndarray, decision: np.ndarray,
                    weights: np.ndarray) -> BinaryMetrics:
    """(F,) truth, (F,) decisions, (B, F) weights -> confusion counts of shape (B,)."""
    t, d = np.asarray(truth).astype(bool), np.asarray(decision).astype(bool)
    w = np.atleast_2d(weights)
    return BinaryMetrics(tp=w @ (t & d), fp=w @ (~t & d), tn=w @ (~t & ~d), fn=w @ (t & ~d))


def _divide(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full_like(num, np.nan, dtype=np.float64), where=den > 0)


def weighted_ranking(scores: np.ndarray, truth: np.ndarray,
                     weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROC-AUC and average precision per weight row: (F,), (F,), (B, F) -> (B,), (B,).

    Equal scores form one group (ties count half in ROC-AUC, one step in the PR curve), as
    in scikit-learn; a row without positives or negatives gives NaN.
    """
    order = np.argsort(scores, kind="stable")                       # ascending
    s, t = np.asarray(scores)[order], np.asarray(truth).astype(bool)[order]
    w = np.atleast_2d(weights)[:, order]                            # (B, F)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])           # (G,) score groups
    pos = np.add.reduceat(w * t, starts, axis=1)                    # (B, G)
    neg = np.add.reduceat(w * ~t, starts, axis=1)                   # (B, G)
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)                 # (B,)
    below = np.cumsum(neg, axis=1) - neg                            # negatives scored lower
    roc = _divide((pos * (below + 0.5 * neg)).sum(axis=1), n_pos * n_neg)
    roc[n_neg == 0] = np.nan
    tp, fp = np.cumsum(pos[:, ::-1], axis=1), np.cumsum(neg[:, ::-1], axis=1)  # descending
    precision = np.divide(tp, tp + fp, out=np.zeros_like(tp), where=(tp + fp) > 0)
    ap = _divide((pos[:, ::-1] * precision).sum(axis=1), n_pos)
    return roc, ap


def _resample_figures(truth: np.ndarray, decision: np.ndarray, scores: np.ndarray,
                      weights: np.ndarray) -> dict[str, np.ndarray]:
    counts = weighted_counts(truth, decision, weights)
    # rates get Wilson intervals (rate_intervals), not percentiles of resamples
    figures = {name: getattr(counts, name) for name in METRIC_NAMES
               if name not in RATE_NAMES}                                # (B,) each
    figures["roc_auc"], figures["pr_auc"] = weighted_ranking(scores, truth, weights)
    return figures


def bootstrap_intervals(truth: np.ndarray, decision: np.ndarray, scores: np.ndarray,
                        recording_ids: np.ndarray, *, resamples: int, confidence: float,
                        seed: int) -> dict[str, Interval]:
    """Percentile intervals of every file-level figure over ``resamples`` recording draws
    (Wilson intervals for the rates)."""
    if resamples < 1 or len(truth) == 0:
        return {}
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, resamples, RESAMPLES_PER_PASS):
        weights = recording_weights(recording_ids, min(RESAMPLES_PER_PASS, resamples - start),
                                    rng)
        for name, values in _resample_figures(truth, decision, scores, weights).items():
            parts.setdefault(name, []).append(values)
    out = {name: interval for name, chunks in parts.items()
           if (interval := percentile_interval(np.concatenate(chunks), confidence)) is not None}
    out.update(rate_intervals(truth, decision, recording_ids, confidence))
    return out


def percentile_interval(values: np.ndarray, confidence: float) -> Interval | None:
    """Two-sided percentile interval of the finite ``values``; None when there are none."""
    values = values[np.isfinite(values)]
    if not values.size:
        return None
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return Interval(float(low), float(high))


def wilson_interval(successes: float, trials: float, confidence: float) -> Interval:
    """Wilson score interval of a proportion ``successes / trials`` (``trials`` > 0)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z / (1 + z * z / trials) * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials ** 2))
    return Interval(float(max(0.0, centre - half)), float(min(1.0, centre + half)))


def rate_intervals(truth: np.ndarray, decision: np.ndarray, recording_ids: np.ndarray,
                   confidence: float) -> dict[str, Interval]:
    """Wilson intervals of the file-level rates, each over the distinct recordings of its
    denominator (a rate with an empty denominator gets none)."""
    truth, decision = np.asarray(truth, dtype=bool), np.asarray(decision, dtype=bool)
    recording_ids = np.asarray(recording_ids)
    right = truth == decision
    within = {"accuracy": np.ones_like(truth), "precision": decision, "recall": truth,
              "specificity": ~truth}
    out = {}
    for name in RATE_NAMES:
        rows = within[name]
        if rows.any():
            recordings = len(np.unique(recording_ids[rows]))
            out[name] = wilson_interval(right[rows].mean() * recordings, recordings, confidence)
    return out


def f1_from_counts(counts: BinaryMetrics) -> np.ndarray:
    """F1 per resample from weighted confusion counts; NaN where nothing is LEAK at all."""
    return _divide(2.0 * counts.tp, 2.0 * counts.tp + counts.fp + counts.fn)


def paired_f1_difference(truth: np.ndarray, decision_a: np.ndarray, decision_b: np.ndarray,
                         recording_ids: np.ndarray, *, resamples: int, confidence: float,
                         seed: int) -> Interval | None:
    """Percentile interval of F1(a) - F1(b) when both are scored on the same recording draws.

    Two detectors tested on one test set share its luck: a paired interval of their difference
    is much narrower than comparing their two separate intervals, and it is what says whether
    one is ahead. None when there is nothing to resample.
    """
    if resamples < 1 or len(truth) == 0:
        return None
    rng = np.random.default_rng(seed)
    diffs = []
    for start in range(0, resamples, RESAMPLES_PER_PASS):
        weights = recording_weights(recording_ids, min(RESAMPLES_PER_PASS, resamples - start),
                                    rng)
        diffs.append(f1_from_counts(weighted_counts(truth, decision_a, weights))
                     - f1_from_counts(weighted_counts(truth, decision_b, weights)))
    return percentile_interval(np.concatenate(diffs), confidence)
