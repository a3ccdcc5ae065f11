"""The cross-validation figure: per-fold ROC-AUC of every method beside its pooled value and
interval, and the CNN's val curve per fold (does it still peak at epoch 1?)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

FIGURE_SIZE = (11.0, 4.2)


def folds_figure(summary: Mapping[str, Any],
                 histories: Sequence[Sequence[Mapping[str, float]]]) -> Figure:
    """Left: recording ROC-AUC per fold (dots) and pooled with its site-bootstrap interval (bar);
    right: the CNN's val clip F1 per epoch in every fold (empty without the CNN)."""
    import matplotlib

    matplotlib.use("Agg")
    fig = Figure(figsize=FIGURE_SIZE, layout="constrained")
    left, right = fig.subplots(1, 2)
    methods = list(summary["methods"])
    selected = summary.get("selected")
    for i, m in enumerate(methods):
        auc = summary["methods"][m]["recording_roc_auc"]
        folds = [v for v in auc["folds"] if v is not None and math.isfinite(v)]
        left.scatter([i - 0.15] * len(folds), folds, s=18, color="grey", zorder=2)
        low, high = auc["ci_low"], auc["ci_high"]
        if math.isfinite(low) and math.isfinite(high):
            left.errorbar([i + 0.15], [auc["mean"]], yerr=[[auc["mean"] - low],
                                                           [high - auc["mean"]]],
                          fmt="o", color="C3" if m == selected else "C0", capsize=4, zorder=3)
    left.axhline(0.5, color="red", linewidth=0.8, linestyle="--")
    labels = [f"{m}\n(selected)" if m == selected else m for m in methods]
    left.set_xticks(range(len(methods)), labels, rotation=20)
    for tick, m in zip(left.get_xticklabels(), methods, strict=True):
        if m == selected:
            tick.set_fontweight("bold")
    left.set(ylabel="ROC-AUC (recordings)", ylim=(0.0, 1.02),
             title=f"{summary['folds']}-fold grouped CV, {summary['sites']} sites; selected: "
                   f"{selected}\ngrey: each fold; pooled with its 95 % site-bootstrap interval "
                   "(red: the selected kind)")
    for f, history in enumerate(histories):
        epochs = [int(h["epoch"]) + 1 for h in history]
        right.plot(epochs, [h.get("val/clip_f1", math.nan) for h in history], marker="o",
                   label=f"fold {f + 1}")
    right.set(xlabel="epoch", ylabel="val clip F1", ylim=(-0.02, 1.02),
              title="CNN: inner-val clip F1 per epoch, per fold")
    right.xaxis.get_major_locator().set_params(integer=True)
    if histories:
        right.legend(loc="best", fontsize="small")
    return fig
