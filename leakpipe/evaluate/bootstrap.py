"""Bootstrap confidence intervals of binary figures, resampling recordings.

Clips of one recording are not independent (two clips of the same pipe sound alike), so the
unit resampled is the recording: each resample draws recordings with replacement and every item
of a recording drawn k times gets weight k. Items are files, or segments (each carrying its
file's recording): the same draws serve both, so file- and segment-level intervals describe
the same resampled test sets. Confusion counts are summed per recording once, then each block
of resamples is one matrix product of the (B, R) draw counts; ROC-AUC and average precision
(the area under the precision-recall curve, as scikit-learn computes it) are one sort of the
fixed scores plus cumulative sums per resample (``leakpipe.evaluate.ranking``). Intervals are
percentile intervals; a figure that is undefined in a resample (no leak drawn) is left out of
its percentiles.

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
from leakpipe.evaluate.ranking import ScoreOrder, sorted_ranking, weighted_ranking

RANKING_NAMES = ("roc_auc", "pr_auc")
RATE_NAMES = ("accuracy", "precision", "recall", "specificity")   # Wilson intervals
RESAMPLES_PER_PASS = 256   # weight rows held at once: bounds memory to 256 x files floats
RANKING_VALUES = 1 << 19   # items x resamples per ranking step (a few MB, cache-sized)

__all__ = ["RANKING_NAMES", "RATE_NAMES", "RESAMPLES_PER_PASS", "Interval",
           "bootstrap_intervals", "f1_from_counts", "paired_f1_difference",
           "percentile_interval", "rate_intervals", "recording_draws", "recording_index",
           "recording_weights", "weighted_counts", "weighted_ranking", "wilson_interval"]


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


def recording_index(recording_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """(F,) recording id per item -> (F,) index of its recording, number of recordings."""
    _, inverse = np.unique(np.asarray(recording_ids), return_inverse=True)
    inverse = inverse.reshape(-1)
    return inverse, int(inverse.max()) + 1 if inverse.size else 0


def recording_draws(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(B, R) how often each of ``n`` recordings is drawn in each of ``resamples`` draws."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples)


def recording_weights(recording_ids: np.ndarray, resamples: int,
                      rng: np.random.Generator) -> np.ndarray:
    """(F,) recording id per file -> (B, F) clip weights of ``resamples`` recording draws."""
    inverse, n = recording_index(recording_ids)
    return recording_draws(n, resamples, rng)[:, inverse].astype(np.float64)   # (B, F)


def weighted_counts(truth: np.ndarray, decision: np.ndarray,
                    weights: np.ndarray) -> BinaryMetrics:
    """(F,) truth, (F,) decisions, (B, F) weights -> confusion counts of shape (B,)."""
    t, d = np.asarray(truth).astype(bool), np.asarray(decision).astype(bool)
    w = np.atleast_2d(weights)
    return BinaryMetrics(tp=w @ (t & d), fp=w @ (~t & d), tn=w @ (~t & ~d), fn=w @ (t & ~d))


@dataclass(frozen=True)
class _Resampled:
    """What one set of items needs per resample, prepared once.

    Confusion counts are summed per recording first (a resample's count is then one product
    of the (B, R) draws with (R,) sums, whatever the number of items: segments cost what
    files cost); ranking figures need every item in score order (``ranking.ScoreOrder``).
    """

    inverse: np.ndarray                # (F,) recording index per item
    n_recordings: int
    per_recording: BinaryMetrics       # (R,) confusion counts of each recording's items
    score_order: ScoreOrder | None     # None: no ranking figures
    weight_dtype: type                 # exact integer type of the cumulative weights

    @classmethod
    def of(cls, truth: np.ndarray, decision: np.ndarray, scores: np.ndarray | None,
           recording_ids: np.ndarray) -> _Resampled:
        t, d = np.asarray(truth).astype(bool), np.asarray(decision).astype(bool)
        inverse, n = recording_index(recording_ids)

        def per(mask: np.ndarray) -> np.ndarray:
            return np.bincount(inverse, weights=mask, minlength=n)

        # a cumulative weight is at most every draw landing on the largest recording
        biggest = int(np.bincount(inverse, minlength=n).max()) if n else 0
        dtype = np.int32 if n * biggest < np.iinfo(np.int32).max else np.int64
        return cls(inverse=inverse, n_recordings=n,
                   per_recording=BinaryMetrics(tp=per(t & d), fp=per(~t & d),
                                               tn=per(~t & ~d), fn=per(t & ~d)),
                   score_order=None if scores is None else ScoreOrder.of(scores, t),
                   weight_dtype=dtype)

    def figures(self, draws: np.ndarray) -> dict[str, np.ndarray]:
        """(B, R) draws -> every percentile-bootstrapped figure, (B,) each."""
        c = self.per_recording
        counts = BinaryMetrics(tp=draws @ c.tp, fp=draws @ c.fp, tn=draws @ c.tn,
                               fn=draws @ c.fn)
        # rates get Wilson intervals (rate_intervals), not percentiles of resamples
        out = {name: getattr(counts, name) for name in METRIC_NAMES if name not in RATE_NAMES}
        if self.score_order is not None:
            out["roc_auc"], out["pr_auc"] = self._ranking(draws)
        return out

    def _ranking(self, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = self.score_order
        assert order is not None
        item_recording = self.inverse[order.order]                      # (F,) in score order
        step = max(1, RANKING_VALUES // max(1, len(item_recording)))
        parts = []
        for i in range(0, draws.shape[0], step):
            per_recording = np.ascontiguousarray(draws[i:i + step].T, dtype=self.weight_dtype)
            weights = np.take(per_recording, item_recording, axis=0)    # (F, step)
            parts.append(sorted_ranking(weights, order))
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def bootstrap_intervals(truth: np.ndarray, decision: np.ndarray, scores: np.ndarray | None,
                        recording_ids: np.ndarray, *, resamples: int, confidence: float,
                        seed: int) -> dict[str, Interval]:
    """Percentile intervals of every binary figure over ``resamples`` recording draws
    (Wilson intervals for the rates).

    Items may be files or segments: each item carries its recording's id, and a recording
    drawn k times brings all its items k times. ``scores`` None: no ROC-AUC / PR-AUC (e.g.
    per-class figures of argmax decisions, which have no score to rank by).
    """
    if resamples < 1 or len(truth) == 0:
        return {}
    rng = np.random.default_rng(seed)
    items = _Resampled.of(truth, decision, scores, recording_ids)
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, resamples, RESAMPLES_PER_PASS):
        draws = recording_draws(items.n_recordings,
                                min(RESAMPLES_PER_PASS, resamples - start), rng)
        for name, values in items.figures(draws).items():
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
    """Wilson score interval of a proportion ``successes / trials`` (``trials`` > 0).

    The interval always holds the observed rate (its upper end is exactly 1 at a rate of 1);
    the bounds are clamped to it, as float rounding left 0.9999999999999999 above a rate of 1.
    """
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z / (1 + z * z / trials) * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials ** 2))
    return Interval(float(max(0.0, min(p, centre - half))), float(min(1.0, max(p, centre + half))))


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


def _divide(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full_like(num, np.nan, dtype=np.float64), where=den > 0)


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
