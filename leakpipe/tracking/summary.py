"""A stage's summary figures on its MLflow run: a few headline charts, one figure per family,
every figure in one table.

MLflow draws one chart per metric, and a figure logged once is a one-bar chart whose axis
rescales to its value (an interval's lower end of 0.00 draws as a full bar). An evaluate run
with every figure as a metric had about 300 such charts, which no one reads as charts. So only
the headline figures are metrics (``HEADLINE``: F1 and ROC-AUC of each split or method, the
calibration's ECE and Brier score: what runs are sorted and compared by in the runs table);
every figure with an interval is drawn once more in ``summary.png``, one panel per family (the
name up to its last ``/``: ``test``, ``cv/fused``), each figure a dot with its interval on one
0-1 axis, so figures of one family are read side by side on one scale; and every figure, those
included, is one row of the run's summary table (figure, value and its interval beside it),
which the UI shows as a table in the artifacts view.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from leakpipe.tracking.trackers import Tracker

BOUNDS = ("_ci_low", "_ci_high")
HEADLINE = re.compile(r"(^|/)(clip|recording)_(f1|roc_auc)$|(^|/)(ece|brier)$")
SUMMARY_COLUMNS = ("figure", "value", "ci_low", "ci_high")
FIGURE_NAME = "summary.png"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def charted(metrics: Mapping[str, float]) -> dict[str, float]:
    """The finite headline figures (``HEADLINE``): one chart each in the UI. A per-class
    breakdown (``*/class/*``) is never one."""
    return {k: float(v) for k, v in metrics.items()
            if HEADLINE.search(k) and "/class/" not in k and _number(v)}


def summary_table(metrics: Mapping[str, float]) -> dict[str, list[Any]]:
    """Every figure as one row (``SUMMARY_COLUMNS``), its interval ends beside it rather than
    rows of their own; sorted by figure. A non-finite value is None (strict JSON)."""
    def shown(value: Any) -> float | None:
        return float(value) if _number(value) else None

    figures = sorted(k for k in metrics if not k.endswith(BOUNDS))
    return {"figure": figures,
            "value": [shown(metrics[k]) for k in figures],
            "ci_low": [shown(metrics.get(f"{k}_ci_low")) for k in figures],
            "ci_high": [shown(metrics.get(f"{k}_ci_high")) for k in figures]}


def families(metrics: Mapping[str, float]) -> dict[str, list[tuple[str, float, float, float]]]:
    """Family -> (name, value, ci_low, ci_high) of each figure with a finite interval on the
    0-1 scale (a rate or an area), per-class breakdowns left to the table."""
    out: dict[str, list[tuple[str, float, float, float]]] = defaultdict(list)
    for key in sorted(metrics):
        low, high = metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")
        value = metrics[key]
        if key.endswith(BOUNDS) or "/class/" in key or not all(map(_number, (value, low, high))):
            continue
        if not all(0.0 <= float(v) <= 1.0 for v in (value, low, high)):
            continue
        family, _, name = key.rpartition("/")
        out[family or "figures"].append((name, float(value), float(low), float(high)))
    return dict(out)


def summary_figure(metrics: Mapping[str, float]) -> Any | None:
    """``families(metrics)`` drawn one panel each (None when no figure has an interval)."""
    groups = families(metrics)
    if not groups:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 2 if len(groups) > 1 else 1
    rows = math.ceil(len(groups) / cols)
    height = max(len(g) for g in groups.values()) * 0.32 + 0.9
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, height * rows), squeeze=False)
    for ax, (family, items) in zip(axes.flat, groups.items(), strict=False):
        y = list(range(len(items)))[::-1]
        values = [v for _, v, _, _ in items]
        errors = [[v - lo for _, v, lo, _ in items], [hi - v for _, v, _, hi in items]]
        ax.errorbar(values, y, xerr=errors, fmt="o", color="tab:blue", ecolor="tab:gray",
                    capsize=3)
        ax.set_yticks(y, [name for name, *_ in items], fontsize=8)
        ax.set_xlim(0.0, 1.0)
        ax.set_title(family, fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.supxlabel("value with its interval", fontsize=9)
    fig.tight_layout()
    return fig


def log_summary(run: Tracker, metrics: Mapping[str, float], folder: str) -> None:
    """``charted(metrics)`` as the run's metrics, ``summary_table(metrics)`` as the table
    artifact ``<folder>/summary.json`` and ``summary_figure(metrics)`` as
    ``<folder>/summary.png``."""
    run.log_metrics(charted(metrics))
    if not metrics:
        return
    run.log_table(summary_table(metrics), f"{folder}/summary.json")
    figure = summary_figure(metrics)
    if figure is not None:
        import matplotlib.pyplot as plt

        run.log_figure(figure, f"{folder}/{FIGURE_NAME}")
        plt.close(figure)


__all__ = ["FIGURE_NAME", "HEADLINE", "SUMMARY_COLUMNS", "charted", "families", "log_summary",
           "summary_figure", "summary_table"]
