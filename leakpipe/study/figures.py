"""The grid's heatmap: a matplotlib figure (MLflow, PNG) and DVC plot records."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from leakpipe.study.grid import STATUS_DONE, STATUS_INVALID

FIGSIZE = (6.0, 4.5)
ROUND = 4


def heatmap_figure(rows: Sequence[Mapping[str, Any]], metric: str, title: str) -> Figure:
    """Long window (rows) x short window (columns), coloured by ``metric``; each cell shows its
    value, "n/a" where it cannot exist and "failed" where its experiment gave nothing."""
    longs = sorted({r["long_window_s"] for r in rows})
    shorts = sorted({r["short_window"] for r in rows})
    values = np.full((len(longs), len(shorts)), np.nan)            # (long, short)
    labels = [["" for _ in shorts] for _ in longs]
    for r in rows:
        i, j = longs.index(r["long_window_s"]), shorts.index(r["short_window"])
        value = r[metric]
        if r["status"] == STATUS_DONE and math.isfinite(value):
            values[i, j] = value
            labels[i][j] = f"{value:.3f}"
        else:
            labels[i][j] = "n/a" if r["status"] == STATUS_INVALID else r["status"]
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.subplots()
    shown = np.ma.masked_invalid(values)
    image = ax.imshow(shown, cmap="viridis", aspect="auto")
    fig.colorbar(image, ax=ax, label=metric)
    finite = values[np.isfinite(values)]
    middle = float(finite.min() + finite.max()) / 2 if finite.size else 0.0
    for i in range(len(longs)):
        for j in range(len(shorts)):
            dark = np.isfinite(values[i, j]) and values[i, j] < middle
            ax.text(j, i, labels[i][j], ha="center", va="center",
                    color="white" if dark else "black", fontsize=9)
    ax.set_xticks(range(len(shorts)), [str(s) for s in shorts])
    ax.set_yticks(range(len(longs)), [f"{v:g}" for v in longs])
    ax.set_xlabel("short segment (samples)")
    ax.set_ylabel("long segment (s)")
    ax.set_title(title)
    return fig


def heatmap_records(rows: Sequence[Mapping[str, Any]], metric: str) -> list[dict[str, Any]]:
    """One record per cell that ran, for `dvc plots show` (``{"long_window_s",
    "short_window", metric}``; the template draws a rect per record)."""
    return [{"long_window_s": r["long_window_s"], "short_window": r["short_window"],
             metric: round(r[metric], ROUND)}
            for r in rows if r["status"] == STATUS_DONE and math.isfinite(r[metric])]
