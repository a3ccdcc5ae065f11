"""Calibrated leak probabilities: Platt scaling of the rule's file score, ECE and Brier score.

The rule's score (``voting.file_scores``) ranks files well but is no probability: a long-segment
vote at the operating point 0.26 calls a clip LEAK whose "probability" is a quarter. Calibration
maps it to ``P(LEAK | score)``, fitted on the val split's clip scores (the split the operating
point is chosen on; the test split only reports how well it worked).

**Platt scaling** (logistic regression on the logit of the score: ``p = sigmoid(a logit(s) + b)``
with ``a > 0``), not temperature scaling (``sigmoid(logit(s) / T)``): temperature has no
intercept, so it keeps 0.5 at 0.5 and can only sharpen or flatten around it, while the rule's
score is shifted (the vote and the class balance put the best threshold far from 0.5); Platt's
intercept moves it. Two parameters fit on a few hundred val clips without overfitting (an
isotonic map would need many more and is a step function with ties). With ``a > 0`` the map is
strictly increasing, so the ranking (ROC-AUC, PR-AUC) is unchanged and the operating point maps
through the same function: ``score >= threshold <=> prob(score) >= prob(threshold)``. Decisions
are still taken on the raw score (float rounding cannot turn a strict ``<`` into a tie there);
the mapped threshold is what a reader compares a probability with.

The fit uses Platt's smoothed targets ``(N+ + 1) / (N+ + 2)`` and ``1 / (N- + 2)`` instead of
1 / 0, so a val split the score separates perfectly (common on synthetic data) still gives
finite parameters. Without both classes on val, or with a fitted slope <= 0 (the score ranks
leaks below non-leaks), there is nothing to calibrate by: the result is the identity with a
note saying why, and ``leak_prob`` stays the raw score.

ECE uses 10 **equal-width** bins over [0, 1] (Guo et al. 2017): the weighted mean gap between
the mean probability and the observed leak share per bin; equal-width bins are the ones the
reliability diagram draws against its diagonal, and their figures compare with published ones.
Empty bins contribute nothing. The Brier score is the mean squared error of the probability.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

METHODS: tuple[str, ...] = ("identity", "platt")
ECE_BINS = 10
LOGIT_EPS = 1e-6        # scores are clipped to [eps, 1 - eps]: float32 sigmoids reach 0 and 1
MAX_ITER = 100          # Newton steps (a well-posed fit converges in under 10)
TOLERANCE = 1e-10       # largest parameter change at convergence
UNFITTED = "not calibrated"


@dataclass(frozen=True)
class Calibration:
    """A monotone map from the rule's score to a leak probability (identity: none)."""

    method: str = "identity"
    slope: float = 1.0        # a of sigmoid(a logit(s) + b)
    intercept: float = 0.0    # b
    fitted_on: int = 0        # val clips the fit saw
    note: str = UNFITTED      # why the identity (empty for a fit)

    def prob(self, scores: np.ndarray | float) -> np.ndarray:
        """Leak probabilities of rule scores (same shape, float64)."""
        s = np.asarray(scores, dtype=np.float64)
        if self.method == "identity":
            return s
        return _sigmoid(self.slope * logit(s) + self.intercept)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Calibration:
        """The stored form; ``ValueError`` naming the field when it is not a valid one."""
        if not isinstance(raw, dict) or set(raw) != {f for f in asdict(cls())}:
            raise ValueError(f"fields must be {sorted(asdict(cls()))}")
        out = cls(method=str(raw["method"]), slope=float(raw["slope"]),
                  intercept=float(raw["intercept"]), fitted_on=int(raw["fitted_on"]),
                  note=str(raw["note"]))
        if out.method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}, got {out.method!r}")
        if not (math.isfinite(out.slope) and out.slope > 0 and math.isfinite(out.intercept)):
            raise ValueError(f"slope must be finite and > 0 and intercept finite, got "
                             f"{out.slope!r}, {out.intercept!r}")
        return out

    def describe(self) -> str:
        """One line: 'platt (a 2.1, b -0.4, 300 val clips)' or 'identity: <why>'."""
        if self.method == "identity":
            return f"identity: {self.note}"
        return (f"platt (slope {self.slope:.4g}, intercept {self.intercept:.4g}, "
                f"{self.fitted_on} val clips)")


IDENTITY = Calibration()


def logit(scores: np.ndarray | float) -> np.ndarray:
    """log(s / (1 - s)) of scores clipped to [LOGIT_EPS, 1 - LOGIT_EPS]."""
    s = np.clip(np.asarray(scores, dtype=np.float64), LOGIT_EPS, 1.0 - LOGIT_EPS)
    return np.log(s) - np.log1p(-s)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))      # 1 / (1 + e^-z) without overflow


def _loss(x: np.ndarray, t: np.ndarray, a: float, b: float) -> float:
    """Cross-entropy of sigmoid(a x + b) against the soft targets t."""
    z = a * x + b
    return float(np.sum(t * np.logaddexp(0.0, -z) + (1.0 - t) * np.logaddexp(0.0, z)))


def fit_platt(scores: np.ndarray, truth: np.ndarray) -> Calibration:
    """Platt scaling of (N,) rule scores against (N,) 0/1 truth (val only), by Newton's method
    with step halving; the identity (with its reason) when nothing can be calibrated."""
    x = logit(scores).reshape(-1)
    y = np.asarray(truth, dtype=bool).reshape(-1)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return Calibration(note=f"val holds {'no leaks' if n_pos == 0 else 'only leaks'}")
    t = np.where(y, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    a, b = 1.0, 0.0
    loss = _loss(x, t, a, b)
    for _ in range(MAX_ITER):
        p = _sigmoid(a * x + b)
        w = p * (1.0 - p)
        grad = np.array([np.dot(x, p - t), np.sum(p - t)])
        hess = np.array([[np.dot(w * x, x), np.sum(w * x)], [np.sum(w * x), np.sum(w)]])
        step = np.linalg.solve(hess + 1e-12 * np.eye(2), grad)
        scale = 1.0
        while (new := _loss(x, t, a - scale * step[0], b - scale * step[1])) > loss:
            scale /= 2.0
            if scale < 1e-8:           # no step lowers the loss: at its minimum to rounding
                break
        else:
            a, b, loss = a - scale * step[0], b - scale * step[1], new
        if scale < 1e-8 or scale * float(np.max(np.abs(step))) < TOLERANCE:
            break
    if not a > 0:
        return Calibration(note=f"the val scores rank leaks below non-leaks (Platt slope {a:.3g})")
    return Calibration(method="platt", slope=float(a), intercept=float(b), fitted_on=len(y),
                       note="")


@dataclass(frozen=True)
class Reliability:
    """Per equal-width bin of the probability, each (bins,): its edges, how many items fall in
    it, their mean probability and their observed leak share (NaN where the bin is empty)."""

    low: np.ndarray
    high: np.ndarray
    count: np.ndarray
    predicted: np.ndarray
    observed: np.ndarray

    def ece(self) -> float:
        """Expected calibration error: sum over bins of |predicted - observed| * count / N."""
        total = int(self.count.sum())
        if total == 0:
            return float("nan")
        full = self.count > 0
        gaps = np.abs(self.predicted[full] - self.observed[full])
        return float(np.sum(gaps * self.count[full]) / total)


def reliability(probs: np.ndarray, truth: np.ndarray, bins: int = ECE_BINS) -> Reliability:
    """Bin (N,) probabilities into ``bins`` equal-width bins of [0, 1] (1.0 in the last one)."""
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    y = np.asarray(truth, dtype=np.float64).reshape(-1)
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip((p * bins).astype(np.int64), 0, bins - 1)        # (N,)
    count = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        predicted = np.bincount(index, weights=p, minlength=bins) / count
        observed = np.bincount(index, weights=y, minlength=bins) / count
    return Reliability(low=edges[:-1], high=edges[1:], count=count, predicted=predicted,
                       observed=observed)


def expected_calibration_error(probs: np.ndarray, truth: np.ndarray,
                               bins: int = ECE_BINS) -> float:
    """ECE over ``bins`` equal-width bins; NaN for no items."""
    return reliability(probs, truth, bins).ece()


def brier_score(probs: np.ndarray, truth: np.ndarray) -> float:
    """Mean of (probability - truth)^2; NaN for no items."""
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    if p.size == 0:
        return float("nan")
    return float(np.mean((p - np.asarray(truth, dtype=np.float64).reshape(-1)) ** 2))
