"""How well the calibrated leak probability means what it says, on the test split.

The calibration is fitted on val (``leakpipe.decision.calibration.fit_platt``); here the test
files' rule scores are judged before and after it, so the report shows what calibration bought:

- figures ``test/ece`` and ``test/brier`` (calibrated, what predict reports) and
  ``test/ece_uncalibrated`` / ``test/brier_uncalibrated`` (the raw rule score), with
  the fitted map (``eval/calibration_slope`` / ``_intercept``) and the operating point as a
  probability (``eval/prob_threshold``, predict's ``threshold`` column);
- ``reliability.csv`` (a DVC plot): one row per equal-width probability bin with the mean
  probability (``predicted``) and the observed leak share (``observed``) of its test files,
  and the same for the raw score (``*_uncalibrated``); an empty bin's figures are blank;
- the same diagram as a matplotlib figure for MLflow, both curves against the diagonal.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from leakpipe.decision.calibration import (
    ECE_BINS,
    Calibration,
    Reliability,
    brier_score,
    reliability,
)

RELIABILITY_FILE = "reliability.csv"
UNCALIBRATED = "_uncalibrated"
BIN_COLUMNS = ("count", "predicted", "observed")
RELIABILITY_COLUMNS = ("bin_low", "bin_high", *BIN_COLUMNS,
                       *(f"{c}{UNCALIBRATED}" for c in BIN_COLUMNS))
FIGSIZE = (4.5, 4.0)
ROUND = 6


def calibration_figures(split: str, truth: np.ndarray, scores: np.ndarray,
                        calibration: Calibration, threshold: float) -> dict[str, float]:
    """The fitted map (the identity: slope 1, intercept 0), the operating point ``threshold``
    through it (``eval/prob_threshold``) and the ECE and Brier score of the split's calibrated
    probabilities and of its raw scores."""
    out = {"eval/calibration_slope": calibration.slope,
           "eval/calibration_intercept": calibration.intercept,
           "eval/prob_threshold": float(calibration.prob(threshold))}
    for suffix, probs in (("", calibration.prob(scores)), (UNCALIBRATED, scores)):
        out[f"{split}/ece{suffix}"] = reliability(probs, truth, ECE_BINS).ece()
        out[f"{split}/brier{suffix}"] = brier_score(probs, truth)
    return out


def _cells(bins: Reliability, k: int, suffix: str) -> dict[str, Any]:
    empty = bins.count[k] == 0
    return {f"count{suffix}": int(bins.count[k]),
            f"predicted{suffix}": "" if empty else round(float(bins.predicted[k]), ROUND),
            f"observed{suffix}": "" if empty else round(float(bins.observed[k]), ROUND)}


def reliability_rows(truth: np.ndarray, scores: np.ndarray,
                     calibration: Calibration) -> list[dict[str, Any]]:
    """The rows of ``reliability.csv``: one per bin, calibrated and raw side by side."""
    after = reliability(calibration.prob(scores), truth, ECE_BINS)
    before = reliability(scores, truth, ECE_BINS)
    return [{"bin_low": round(float(after.low[k]), ROUND),
             "bin_high": round(float(after.high[k]), ROUND),
             **_cells(after, k, ""), **_cells(before, k, UNCALIBRATED)}
            for k in range(ECE_BINS)]


def reliability_figure(rows: list[dict[str, Any]], figures: dict[str, float], split: str,
                       title: str) -> Figure:
    """Observed leak share over mean probability per bin, before and after calibration."""
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey", label="perfect")
    for suffix, name in ((UNCALIBRATED, "raw score"), ("", "calibrated")):
        points = [(r[f"predicted{suffix}"], r[f"observed{suffix}"]) for r in rows
                  if r[f"count{suffix}"]]
        ece = figures.get(f"{split}/ece{suffix}", math.nan)
        ax.plot([p for p, _ in points], [o for _, o in points], marker="o",
                label=f"{name} (ECE {ece:.3f})")
    ax.set(xlabel="mean leak probability in bin", ylabel="observed leak share", title=title,
           xlim=(0, 1), ylim=(0, 1.02))
    ax.legend(loc="upper left")
    return fig
