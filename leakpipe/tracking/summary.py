"""A stage's summary figures on its MLflow run: the headline ones as metrics, all as one table.

MLflow draws one chart per metric, and a figure logged once is a one-bar chart whose axis
rescales to its value (an interval's lower end of 0.00 draws as a full bar). An evaluate run
with every figure as a metric had about 300 such charts, most of them interval ends, per-class
breakdowns and confusion counts, which no one reads as charts. So a figure is a metric (a chart,
searchable, comparable across runs) unless it is one of those; every figure, those included, is
one row of the run's summary table (figure, value and its interval beside it), which the UI
shows as a table in the artifacts view. Pure apart from ``log_summary``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from leakpipe.tracking.trackers import Tracker

BOUNDS = ("_ci_low", "_ci_high")
# interval ends (in the table beside their figure), per-class breakdowns, confusion counts
TABLE_ONLY = re.compile(r"(_ci_low|_ci_high|_tp|_fp|_tn|_fn)$|/class/")
SUMMARY_COLUMNS = ("figure", "value", "ci_low", "ci_high")


def charted(metrics: Mapping[str, float]) -> dict[str, float]:
    """The finite figures that are worth a chart each: not an interval end, a per-class
    breakdown or a confusion count."""
    return {k: float(v) for k, v in metrics.items()
            if not TABLE_ONLY.search(k) and _number(v) and math.isfinite(v)}


def _number(value: Any) -> bool:
    return isinstance(value, int | float)


def summary_table(metrics: Mapping[str, float]) -> dict[str, list[Any]]:
    """Every figure as one row (``SUMMARY_COLUMNS``), its interval ends beside it rather than
    rows of their own; sorted by figure. A non-finite value is None (strict JSON)."""
    def shown(value: Any) -> float | None:
        return float(value) if _number(value) and math.isfinite(value) else None

    figures = sorted(k for k in metrics if not k.endswith(BOUNDS))
    return {"figure": figures,
            "value": [shown(metrics[k]) for k in figures],
            "ci_low": [shown(metrics.get(f"{k}_ci_low")) for k in figures],
            "ci_high": [shown(metrics.get(f"{k}_ci_high")) for k in figures]}


def log_summary(run: Tracker, metrics: Mapping[str, float], name: str) -> None:
    """``charted(metrics)`` as the run's metrics and ``summary_table(metrics)`` as its table
    artifact ``name`` (a ``.json`` path)."""
    run.log_metrics(charted(metrics))
    if metrics:
        run.log_table(summary_table(metrics), name)


__all__ = ["SUMMARY_COLUMNS", "TABLE_ONLY", "charted", "log_summary", "summary_table"]
