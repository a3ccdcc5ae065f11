"""Plot data for DVC (JSON records) and the same plots as matplotlib figures for MLflow.

DVC files (declared under ``plots:`` in dvc.yaml, so `dvc plots show` / `dvc plots diff` work):

- ``confusion.json``: one record per test clip, ``{"actual", "predicted"}`` (confusion
  template);
- ``roc.json``: ``{"fpr", "tpr", "threshold"}`` per ROC point of the test clips;
- ``pr.json``: ``{"recall", "precision", "threshold"}`` per precision-recall point;
- ``threshold.json``: the val grid of the chosen rule, ``{"threshold", "f1", "sensitivity",
  "specificity", "precision"}``: where the operating point was chosen.

Figures are built on ``matplotlib.figure.Figure`` (no pyplot, no global state). This module
knows arrays, not evaluations: ``detector_evaluation.evaluation_figures`` assembles an
evaluation's figures from these, so imports point one way (evaluation -> plots).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from sklearn.metrics import confusion_matrix, precision_recall_curve, roc_curve

from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.metrics import BinaryMetrics

PLOT_FILES = {"confusion": "confusion.json", "roc": "roc.json", "pr": "pr.json",
              "threshold": "threshold.json"}
FIGSIZE = (4.5, 4.0)
ROUND = 6   # decimals kept in plot records


def _num(value: float) -> float | None:
    """JSON-safe number: infinite / NaN thresholds (scikit-learn's sentinels) become null."""
    return round(float(value), ROUND) if np.isfinite(value) else None


def confusion_records(truth: np.ndarray, decision: np.ndarray) -> list[dict[str, str]]:
    return [{"actual": DECISION_NAMES[int(t)], "predicted": DECISION_NAMES[int(d)]}
            for t, d in zip(truth, decision, strict=True)]


def _one_class(truth: np.ndarray) -> bool:
    return bool(np.all(truth) or not np.any(truth))


def roc_records(truth: np.ndarray, scores: np.ndarray) -> list[dict[str, float | None]]:
    if _one_class(truth):
        return []
    fpr, tpr, thresholds = roc_curve(truth, scores)
    return [{"fpr": _num(f), "tpr": _num(t), "threshold": _num(h)}
            for f, t, h in zip(fpr, tpr, thresholds, strict=True)]


def pr_records(truth: np.ndarray, scores: np.ndarray) -> list[dict[str, float | None]]:
    if _one_class(truth):
        return []
    precision, recall, thresholds = precision_recall_curve(truth, scores)
    thresholds = np.append(thresholds, np.nan)   # the last point (recall 0) has no threshold
    return [{"recall": _num(r), "precision": _num(p), "threshold": _num(h)}
            for r, p, h in zip(recall, precision, thresholds, strict=True)]


def threshold_records(grid: np.ndarray, curve: BinaryMetrics) -> list[dict[str, float | None]]:
    return [{"threshold": _num(grid[k]), "f1": _num(curve.f1[k]),
             "sensitivity": _num(curve.recall[k]), "specificity": _num(curve.specificity[k]),
             "precision": _num(curve.precision[k])} for k in range(len(grid))]


def plot_data(truth: np.ndarray, decision: np.ndarray, scores: np.ndarray, grid: np.ndarray,
              val_curve: BinaryMetrics) -> dict[str, list[dict[str, Any]]]:
    """Every DVC plot file's records, keyed like ``PLOT_FILES``."""
    return {"confusion": confusion_records(truth, decision), "roc": roc_records(truth, scores),
            "pr": pr_records(truth, scores), "threshold": threshold_records(grid, val_curve)}


# -- figures ------------------------------------------------------------------------------------

def confusion_figure(actual: np.ndarray, predicted: np.ndarray, names: Sequence[str],
                     title: str) -> Figure:
    """Counts with the actual class on rows; labels are indices into ``names``."""
    actual, predicted = np.asarray(actual, np.int64), np.asarray(predicted, np.int64)
    matrix = confusion_matrix(actual, predicted, labels=np.arange(len(names)))  # (C, C)
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.subplots()
    ax.imshow(matrix, cmap="Blues")
    for (row, col), count in np.ndenumerate(matrix):
        color = "white" if count > matrix.max() / 2 else "black"
        ax.text(col, row, str(count), ha="center", va="center", color=color)
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("actual")
    ax.set_title(title)
    return fig


def curve_figure(records: list[dict[str, Any]], x: str, y: str, title: str,
                 diagonal: bool = False) -> Figure:
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.subplots()
    ax.plot([r[x] for r in records], [r[y] for r in records], drawstyle="steps-post")
    if diagonal:
        ax.plot([0, 1], [0, 1], linestyle=":", color="grey")
    ax.set(xlabel=x, ylabel=y, title=title, xlim=(0, 1), ylim=(0, 1.02))
    return fig


def threshold_figure(records: list[dict[str, Any]], chosen: float, title: str) -> Figure:
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.subplots()
    x = [r["threshold"] for r in records]
    for name in ("f1", "sensitivity", "specificity"):
        ax.plot(x, [r[name] for r in records], label=name)
    ax.axvline(chosen, linestyle="--", color="black", label=f"chosen {chosen:g}")
    ax.set(xlabel="threshold on the clip's rule score", ylabel="val rate (clips)", title=title,
           ylim=(0, 1.02))
    ax.legend(loc="lower left")
    return fig
