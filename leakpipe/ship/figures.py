"""The shipped detector's own errors on the test split, recording by recording.

evaluate's figures are its CNN's, clip by clip, at the CNN's raw threshold; the detector ship
registers may be another kind (`logger_stats`, `fused`) and is called per recording on the
``leak_prob`` scale. These are that detector's: the recording confusion matrix at its
operating point, ROC and precision-recall over its score, and for kinds that give a
calibrated ``leak_prob`` the reliability of it, as DVC plot files (``plots/ship/``) and as
figures on ship's MLflow run. Pure functions of the test recordings' calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from leakpipe.constants import DECISION_NAMES, LEAK_CLASS
from leakpipe.decision.calibration import ECE_BINS, IDENTITY, reliability
from leakpipe.decision.verdict import DECIMALS
from leakpipe.evaluate.plots import (
    confusion_figure,
    confusion_records,
    curve_figure,
    pr_records,
    roc_records,
)
from leakpipe.evaluate.reliability import FIGSIZE, reliability_rows

LEAK_PROB = "leak_prob"
MEAN_CLIP_SCORE = "mean clip rule score"   # the cnn kind: evaluate's clips, averaged


@dataclass(frozen=True)
class ShippedCalls:
    """The shipped detector's call on every test recording."""

    truth: np.ndarray       # (R,) bool: a leak recording
    score: np.ndarray       # (R,) on ``scale``
    decision: np.ndarray    # (R,) bool: called LEAK
    threshold: float        # the operating point on ``scale``
    scale: str              # LEAK_PROB, or MEAN_CLIP_SCORE (not a probability)


def calls_from_rows(rows: Sequence[Mapping[str, Any]]) -> ShippedCalls | None:
    """The test rows of ship's predictions table (``split``, ``truth``, ``leak_prob``,
    ``decision``, ``threshold``); None without a test row."""
    test = [r for r in rows if r["split"] == "test" and r["leak_prob"] not in ("", None)]
    if not test:
        return None
    return ShippedCalls(truth=np.array([int(r["truth"]) == 1 for r in test]),
                     score=np.array([float(r["leak_prob"]) for r in test]),
                     decision=np.array([r["decision"] == LEAK_CLASS for r in test]),
                     threshold=float(test[0]["threshold"]), scale=LEAK_PROB)


def plot_records(calls: ShippedCalls) -> dict[str, list[dict[str, Any]]]:
    """``plots/ship/<name>.json`` records: confusion, roc, pr (and reliability on leak_prob)."""
    out: dict[str, list[dict[str, Any]]] = {
        "confusion": confusion_records(calls.truth, calls.decision),
        "roc": roc_records(calls.truth, calls.score), "pr": pr_records(calls.truth, calls.score)}
    if calls.scale == LEAK_PROB:
        out["reliability"] = reliability_rows(calls.truth, calls.score, IDENTITY)
    return out


def shipped_figures(kind: str, calls: ShippedCalls) -> dict[str, Figure]:
    """The figures of ``plot_records`` by artifact name, titled with the kind and the scale."""
    n, leaks = len(calls.truth), int(calls.truth.sum())
    at = f"{calls.scale} {calls.threshold:.{DECIMALS}f}"
    records = plot_records(calls)
    figures = {"confusion_test": confusion_figure(
        calls.truth.astype(int), calls.decision.astype(int), DECISION_NAMES,
        f"shipped {kind}: {n} test recordings ({leaks} leaks)\nat {at}")}
    if records["roc"]:
        figures["roc_test"] = curve_figure(records["roc"], "fpr", "tpr",
                                           f"shipped {kind}: test recordings, ROC", True)
        figures["pr_test"] = curve_figure(records["pr"], "recall", "precision",
                                          f"shipped {kind}: test recordings, PR")
    if calls.scale == LEAK_PROB:
        figures["reliability_test"] = _reliability_figure(kind, calls)
    return figures


def _reliability_figure(kind: str, calls: ShippedCalls) -> Figure:
    """Observed leak share over mean leak_prob per bin (``ECE_BINS`` equal-width bins)."""
    bins = reliability(calls.score, calls.truth, ECE_BINS)
    filled = bins.count > 0
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey", label="perfect")
    ax.plot(bins.predicted[filled], bins.observed[filled], marker="o", color="C0",
            label=f"leak_prob (ECE {bins.ece():.3f}, {len(calls.truth)} recordings)")
    ax.set(xlabel="mean leak_prob in bin", ylabel="observed leak share",
           title=f"shipped {kind}: leak_prob reliability", xlim=(0, 1), ylim=(0, 1.02))
    ax.legend(loc="upper left")
    return fig
