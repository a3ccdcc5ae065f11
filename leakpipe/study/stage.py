"""`leakpipe study grid`: the segmentation-grid study as one command (paper Fig. 3).

``run_grid`` plans the grid (``grid.plan_grid``: cells that cannot exist are reported, never
queued), queues one DVC experiment per remaining cell (``queue``), runs them ``jobs`` at a time,
waits, and collects each experiment's ``metrics/eval.json`` into

- ``<out>/grid.csv``: one row per cell (windows, experiment, status, the metrics, a note);
- ``<out>/grid.json``: the same rows with the grid, target and overrides of the run;
- ``<out>/heatmap.png`` and ``<out>/heatmap.json`` (the DVC plot of ``--metric``);
- one MLflow run ``study`` (params: the grid; metrics: each cell's; artifacts: the files above)
  under which every MLflow run of the cells' experiments is nested.

A cell whose experiment already exists with metrics (an earlier study of this commit) is kept,
not re-run; ``--force`` removes and re-queues it. An interrupted study is resumed by running
the command again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from leakpipe import tracking
from leakpipe.config import load_section
from leakpipe.files import csv_text, json_text, write_bytes_atomic, write_text_atomic
from leakpipe.paths import repo_root
from leakpipe.study.figures import heatmap_figure, heatmap_records
from leakpipe.study.grid import (
    DEFAULT_METRICS,
    DEFAULT_OUT,
    DEFAULT_TARGET,
    FULL_LONG_S,
    FULL_SHORT,
    STATUS_DONE,
    STATUS_FAILED,
    Cell,
    GridPlan,
    best_cell,
    plan_grid,
    table_rows,
)
from leakpipe.study.queue import (
    Dvc,
    commit,
    experiments,
    failure_note,
    head,
    queue,
    remove,
    wait,
)

log = logging.getLogger(__name__)

STAGE = "study"
METRICS_FILE = "metrics/eval.json"
DPI = 120


@dataclass(frozen=True)
class GridOptions:
    longs_s: tuple[float, ...] = FULL_LONG_S
    shorts: tuple[int, ...] = FULL_SHORT
    jobs: int = 2
    target: str = DEFAULT_TARGET
    metrics: tuple[str, ...] = DEFAULT_METRICS   # the first one is the heatmap's
    sets: Mapping[str, str] = field(default_factory=dict)   # extra -S for every cell
    out: Path = DEFAULT_OUT
    force: bool = False
    dry_run: bool = False
    baseline: str | None = None    # the commit whose cells to collect (default: HEAD)
    timeout_s: float = 24 * 3600.0
    progress: bool = True


def run_grid(options: GridOptions, params: Path) -> int:
    """The whole study; returns the exit code (0 even if some cells failed: the table says
    which; 1 if none gave a result)."""
    root = repo_root()
    plan = plan_grid(options.longs_s, options.shorts, load_section(params, "build").features)
    for cell, why in plan.invalid.items():
        print(f"study grid: {cell.long_window_s:g} s x {cell.short_window}: cannot exist ({why})")
    if options.dry_run:
        for cell in plan.valid:
            sets = " ".join(f"-S {k}={v}" for k, v in {**cell.overrides(),
                                                         **options.sets}.items())
            print(f"dvc exp run --queue --name {cell.name} {sets} {options.target}")
        return 0
    dvc = Dvc(root)
    baseline = commit(dvc, options.baseline) if options.baseline else head(dvc)
    results, peak = _run_cells(dvc, plan, options, baseline)
    rows = table_rows(plan, results, options.metrics)
    out = root / options.out if not options.out.is_absolute() else options.out
    _write(out, rows, plan, options, peak, baseline)
    _log(rows, options, out)
    _print_table(rows, options.metrics)
    return 0 if any(r["status"] == STATUS_DONE for r in rows) else 1


def _run_cells(dvc: Dvc, plan: GridPlan, options: GridOptions,
               baseline: str) -> tuple[dict[Cell, dict[str, Any]], int]:
    """Queue, run and collect the valid cells of ``baseline`` (kept cells are read back as
    they are); the results and the most experiments seen running at once. Cells are only
    queued when ``baseline`` is the workspace's commit (queued experiments derive from it)."""
    found = experiments(dvc, METRICS_FILE, baseline)
    cells = plan.valid
    if baseline != head(dvc):
        missing = [c.name for c in cells if not found.get(c.name)]
        if missing:
            print(f"study grid: {len(missing)} cells have no results on {baseline[:8]}; "
                  "check that commit out to run them")
        return ({c: ({"status": STATUS_DONE, "metrics": found[c.name]} if found.get(c.name)
                     else {"status": STATUS_FAILED, "note": f"not run on {baseline[:8]}"})
                 for c in cells}, 0)
    stale = [c.name for c in cells if c.name in found and (options.force or not found[c.name])]
    remove(dvc, stale)                              # failed before, or --force
    todo = [c for c in cells if c.name not in found or c.name in stale]
    kept = len(cells) - len(todo)
    if kept:
        print(f"study grid: {kept} cells kept from an earlier run (--force re-runs them)")
    for cell in todo:
        queue(dvc, cell.name, {**cell.overrides(), **options.sets}, options.target)
    statuses: dict[str, str] = {}
    peak = 0
    if todo:
        dvc.start(options.jobs)
        with tqdm(total=len(todo), desc="study grid", unit="cell",
                  disable=not options.progress) as bar:
            def progress(status: dict[str, str]) -> None:
                nonlocal peak
                peak = max(peak, sum(v == "Running" for v in status.values()))
                bar.n = sum(v not in ("Queued", "Running") for v in status.values())
                bar.refresh()
            statuses = wait(dvc, [c.name for c in todo], options.timeout_s, progress)
    found = experiments(dvc, METRICS_FILE, baseline)
    results: dict[Cell, dict[str, Any]] = {}
    for cell in cells:
        metrics = found.get(cell.name) or {}
        if metrics:
            results[cell] = {"status": STATUS_DONE, "metrics": metrics}
        else:
            note = failure_note(dvc, cell.name) if cell.name in statuses else "no metrics"
            results[cell] = {"status": STATUS_FAILED, "note": note}
    return results, peak


def _write(out: Path, rows: Sequence[dict[str, Any]], plan: GridPlan,
           options: GridOptions, peak: int, baseline: str) -> None:
    import io

    metric = options.metrics[0]
    write_text_atomic(out / "grid.csv", csv_text(rows))
    write_text_atomic(out / "grid.json", json_text({
        "target": options.target, "sets": dict(options.sets), "metrics": list(options.metrics),
        "long_windows_s": list(options.longs_s), "short_windows": list(options.shorts),
        "invalid": len(plan.invalid), "jobs": options.jobs, "peak_running": peak,
        "baseline": baseline,
        "cells": [_jsonable(r) for r in rows]}))
    write_text_atomic(out / "heatmap.json", json_text(heatmap_records(rows, metric)))
    buffer = io.BytesIO()
    heatmap_figure(rows, metric, f"Segmentation grid: {metric}").savefig(
        buffer, format="png", dpi=DPI)
    write_bytes_atomic(out / "heatmap.png", buffer.getvalue())


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in row.items()}


def _log(rows: Sequence[dict[str, Any]], options: GridOptions, out: Path) -> None:
    """The study run, with every run of the cells' experiments nested under it."""
    with tracking.start_run(STAGE) as run:
        run.log_params({"study": {"grid": "segmentation", "target": options.target,
                                  "long_windows_s": list(options.longs_s),
                                  "short_windows": list(options.shorts),
                                  "jobs": options.jobs, "sets": dict(options.sets) or "none"}})
        for r in rows:
            for metric in options.metrics:
                if math.isfinite(r[metric]):
                    run.log_metrics({f"grid/{r['experiment']}/{metric}": r[metric]})
        best = best_cell(rows, options.metrics[0])
        if best is not None:
            run.set_tags({"leakpipe.study.best": best["experiment"]})
            run.log_metrics({f"best/{options.metrics[0]}": best[options.metrics[0]]})
        for name in ("grid.csv", "grid.json", "heatmap.png", "heatmap.json"):
            run.log_artifact(out / name, STAGE)
        if run.run_id is not None:
            names = [r["experiment"] for r in rows if r["experiment"]]
            nested = tracking.nest_runs(run.run_id, tracking.DVC_ENV_TAGS["DVC_EXP_NAME"],
                                        names)
            log.info("%d MLflow runs of the grid's experiments nested under %s", nested,
                     run.run_id)


def _print_table(rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> None:
    head = f"{'long_s':>7} {'short':>6} {'status':>8} " + " ".join(f"{m:>20}" for m in metrics)
    print(head)
    for r in rows:
        values = " ".join(f"{r[m]:>20.4f}" if math.isfinite(r[m]) else f"{'-':>20}"
                          for m in metrics)
        print(f"{r['long_window_s']:>7g} {r['short_window']:>6} {r['status']:>8} {values}")
    best = best_cell(rows, metrics[0])
    if best is not None:
        print(f"study grid: best {metrics[0]} {best[metrics[0]]:.4f} at "
              f"{best['long_window_s']:g} s x {best['short_window']} ({best['experiment']})")
