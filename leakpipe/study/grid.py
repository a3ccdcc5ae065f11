"""The segmentation grid (paper Fig. 3): which (long window, short window) cells exist, the
params each one sets, and the table of their results. Pure: no DVC, no files.

A cell sets six `build` params by documented rules, so every cell is a valid feature config of
the same kind as the default (0.25 s / 512 samples):

- ``long_window_s`` = L and ``long_hop_s`` = L / 2 (50 % overlap, the paper's);
- ``short_window`` = S and ``short_hop`` = S // 2 (50 % overlap);
- ``n_fft`` = ``hop_length`` = S: one STFT frame per short segment, as the default's 512 / 512.

A cell whose short window is longer than its long one (S > L x sample_rate), or whose long window
is longer than a clip, cannot exist; it is reported as such and never queued.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe.config import FeatureConfig

FULL_LONG_S = (0.125, 0.25, 0.5, 0.75, 1.0)     # the paper's long windows, seconds
FULL_SHORT = (64, 128, 256, 512, 1024)          # the paper's short windows, samples
# `--quick`: 3 x 2 cells around the default whose clips hold no more short segments than the
# default's (161): a 256-sample short window doubles them and makes a cell many times slower.
QUICK_LONG_S = (0.25, 0.5, 1.0)
QUICK_SHORT = (512, 1024)
NAME_PREFIX = "grid"
QUICK_SETS = {"train.epochs": 2}               # `--quick`: minutes per cell on a CPU
DEFAULT_METRICS = ("test.clip_f1", "test.clip_accuracy")   # metrics/eval.json keys
DEFAULT_TARGET = "evaluate"                   # each experiment runs the pipeline up to here
DEFAULT_OUT = Path("reports/grid")

STATUS_DONE, STATUS_FAILED, STATUS_INVALID = "done", "failed", "invalid"


@dataclass(frozen=True, order=True)
class Cell:
    """One grid cell: a long window in seconds and a short window in samples."""

    long_window_s: float
    short_window: int

    @property
    def name(self) -> str:
        """The DVC experiment name, e.g. ``grid-l250ms-s512`` (unique per cell)."""
        ms = f"{self.long_window_s * 1000:g}".replace(".", "p")
        return f"{NAME_PREFIX}-l{ms}ms-s{self.short_window}"

    def overrides(self) -> dict[str, float | int]:
        """The `build` params this cell sets (module docstring: the rules)."""
        s = self.short_window
        return {"build.long_window_s": self.long_window_s,
                "build.long_hop_s": self.long_window_s / 2,
                "build.short_window": s, "build.short_hop": max(1, s // 2),
                "build.n_fft": s, "build.hop_length": s}


@dataclass(frozen=True)
class GridPlan:
    cells: tuple[Cell, ...]                      # every cell, row-major (long, then short)
    invalid: dict[Cell, str]                     # cells that cannot exist -> why

    @property
    def valid(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c not in self.invalid)


def plan_grid(longs_s: Sequence[float], shorts: Sequence[int],
              features: FeatureConfig) -> GridPlan:
    """Every (long, short) cell, and the reason of each one that cannot exist at ``features``'
    sample rate and clip length (the project's other feature settings are kept)."""
    if not longs_s or not shorts:
        raise ValueError("the grid needs at least one long and one short window")
    cells = tuple(Cell(float(L), int(S)) for L in longs_s for S in shorts)
    if len(set(cells)) != len(cells):
        raise ValueError("the grid repeats a window length")
    invalid = {}
    for cell in cells:
        reason = cell_problem(cell, features)
        if reason:
            invalid[cell] = reason
    return GridPlan(cells, invalid)


def cell_problem(cell: Cell, features: FeatureConfig) -> str:
    """Why ``cell`` cannot exist ("" if it can): the feature config's own checks."""
    long_samples = round(cell.long_window_s * features.sample_rate)
    if cell.short_window > long_samples:
        return (f"short window {cell.short_window} samples is longer than the long window "
                f"{long_samples} samples ({cell.long_window_s:g} s at {features.sample_rate} Hz)")
    changed = {key.split(".", 1)[1]: value for key, value in cell.overrides().items()}
    problems = dataclasses.replace(features, **changed).problems()
    return "; ".join(f"{key} {text}" for key, text in problems)


def metric_value(metrics: Mapping[str, Any], key: str) -> float:
    """``key`` (dotted or slashed, e.g. ``test.clip_f1``) in a nested metrics file; NaN if
    absent."""
    node: Any = metrics
    for part in key.replace("/", ".").split("."):
        if not isinstance(node, Mapping) or part not in node:
            return math.nan
        node = node[part]
    return float(node) if isinstance(node, int | float) else math.nan


def table_rows(plan: GridPlan, results: Mapping[Cell, Mapping[str, Any]],
               metrics: Sequence[str]) -> list[dict[str, Any]]:
    """One row per cell: windows, experiment, status, each metric (NaN where there is none).

    ``results`` maps a finished cell to ``{"status": ..., "metrics": {...}, "note": ...}``; a
    cell missing there was queued but gave nothing back (failed).
    """
    rows = []
    for cell in plan.cells:
        found = results.get(cell, {})
        status = (STATUS_INVALID if cell in plan.invalid
                  else found.get("status", STATUS_FAILED))
        values = found.get("metrics", {})
        rows.append({"long_window_s": cell.long_window_s, "short_window": cell.short_window,
                     "experiment": cell.name if cell not in plan.invalid else "",
                     "status": status,
                     **{m: metric_value(values, m) for m in metrics},
                     "note": plan.invalid.get(cell, found.get("note", ""))})
    return rows


def best_cell(rows: Sequence[Mapping[str, Any]], metric: str) -> Mapping[str, Any] | None:
    """The done row with the highest ``metric`` (the first such in grid order on a tie)."""
    done = [r for r in rows if r["status"] == STATUS_DONE and math.isfinite(r[metric])]
    return max(done, key=lambda r: r[metric]) if done else None
