"""Pure figures over a table of clip scores: ranking, balanced accuracy, distributions.

A table is three aligned (N,) arrays: the clip's leak score (the detector rule's score,
``LEAK <=> score >= threshold``), its truth (1 = LEAK) and its recording id. A figure that needs
both classes is NaN when one is missing, never a silent 0 or 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leakpipe.decision.metrics import roc_auc  # the one ROC-AUC (ties count half)
from leakpipe.evaluate.bootstrap import weighted_ranking

QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
DECIMALS = 4


@dataclass(frozen=True)
class ClipTable:
    """Clip scores of many recordings; every array is (N,)."""

    scores: np.ndarray
    truth: np.ndarray         # 1 = LEAK, 0 = not
    recording: np.ndarray     # recording id per clip

    def __post_init__(self) -> None:
        n = {len(self.scores), len(self.truth), len(self.recording)}
        if len(n) != 1:
            raise ValueError(f"scores, truth and recording differ in length: {sorted(n)}")

    @classmethod
    def concat(cls, tables: list[ClipTable]) -> ClipTable:
        return cls(np.concatenate([t.scores for t in tables]).astype(np.float64),
                   np.concatenate([t.truth for t in tables]).astype(np.int64),
                   np.concatenate([t.recording for t in tables]))

    def of(self, recording: str) -> np.ndarray:
        """The scores of one recording's clips, in time order."""
        return self.scores[self.recording == recording]


def balanced_accuracy(truth: np.ndarray, decision: np.ndarray) -> float:
    """Mean of recall (LEAK) and specificity (not LEAK); NaN unless both classes are present."""
    truth, decision = np.asarray(truth).astype(bool), np.asarray(decision).astype(bool)
    if truth.all() or not truth.any():
        return float("nan")
    return float((decision[truth].mean() + (~decision[~truth]).mean()) / 2.0)


def within_class_weights(truth: np.ndarray, resamples: int,
                         rng: np.random.Generator) -> np.ndarray:
    """(N,) truth -> (B, N) clip weights: each resample redraws the clips of each class with
    replacement (class sizes kept)."""
    truth = np.asarray(truth).astype(bool)
    weights = np.zeros((resamples, truth.size))
    for members in (np.flatnonzero(truth), np.flatnonzero(~truth)):
        if members.size:
            counts = rng.multinomial(members.size, np.full(members.size, 1.0 / members.size),
                                     size=resamples)                 # (B, n_class)
            weights[:, members] = counts
    return weights


def auc_interval(truth: np.ndarray, scores: np.ndarray, *, resamples: int, confidence: float,
                 seed: int) -> tuple[float, float]:
    """Percentile interval of the ROC-AUC over clip resamples within each class (NaN, NaN
    when one class is missing)."""
    truth = np.asarray(truth).astype(bool)
    if truth.all() or not truth.any() or resamples < 1:
        return float("nan"), float("nan")
    weights = within_class_weights(truth, resamples, np.random.default_rng(seed))
    values, _ = weighted_ranking(np.asarray(scores, np.float64), truth, weights)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def distribution(scores: np.ndarray) -> dict[str, float]:
    """n, mean and the ``QUANTILES`` of a set of scores (``q50`` is the median)."""
    scores = np.asarray(scores, np.float64)
    if scores.size == 0:
        return {"n": 0}
    values = np.quantile(scores, QUANTILES)
    out: dict[str, float] = {"n": int(scores.size), "mean": _round(scores.mean())}
    out.update({f"q{round(100 * q):02d}": _round(v) for q, v in zip(QUANTILES, values,
                                                                   strict=True)})
    return out


def table_figures(table: ClipTable, threshold: float | np.ndarray) -> dict[str, float]:
    """ROC-AUC, balanced accuracy, recall and specificity of a table at ``threshold`` (a
    number, or one per clip)."""
    truth = table.truth.astype(bool)
    decision = table.scores >= np.asarray(threshold, np.float64)
    return {"roc_auc": _round(roc_auc(truth, table.scores)),
            "balanced_accuracy": _round(balanced_accuracy(truth, decision)),
            "recall": _round(decision[truth].mean()) if truth.any() else None,
            "specificity": _round((~decision[~truth]).mean()) if (~truth).any() else None}


def recording_figures(scores: np.ndarray, threshold: float) -> dict[str, float]:
    """One recording's clips: count, mean and median score, share called LEAK."""
    scores = np.asarray(scores, np.float64)
    return {"n_clips": int(scores.size), "mean_prob": _round(scores.mean()),
            "median_prob": _round(np.median(scores)),
            "share_called_leak": _round((scores >= threshold).mean())}


def _round(value: float) -> float | None:
    """JSON-friendly: rounded, and None for NaN (JSON has no NaN)."""
    value = float(value)
    return round(value, DECIMALS) if np.isfinite(value) else None
