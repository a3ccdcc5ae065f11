"""`leakpipe study grid` on the reproduced pipeline: queued `dvc exp run` experiments, two at a
time, on this module's copy of the session's one repro (tests/helpers_pipeline.py)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers_pipeline import BIN, copy_of_reproduced, run, run_any

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return copy_of_reproduced(tmp_path_factory, "grid")


# Two cells, neither the default windows, so both re-build and take about as long: with
# `--jobs 2` they run at once. 512 and 1024: cells of 256-sample short windows hold 2-4x the
# segments and train that much slower; the queue, not the windows, is under test here (the
# grid's cell rules are tests/test_study_grid.py's).
GRID = ("--long", "0.5", "--short", "512,1024")
CELLS = {"grid-l500ms-s512", "grid-l500ms-s1024"}
CELL_STAGES = {"build", "validate", "preload", "train", "evaluate"}   # what a cell re-runs


def _study(root: Path, *args: str) -> str:
    return run([sys.executable, "-m", "leakpipe.cli", "study", "grid", *GRID,
                 "--no-progress", *args], root)


def test_segmentation_grid_runs_queued_experiments_two_at_a_time(
        reproduced: tuple[Path, str]) -> None:
    """`leakpipe study grid` on a 1 x 2 grid: two `dvc exp run --queue` experiments with build
    params set (-S), run by `dvc queue start -j 2`; both finish, they ran at once, their
    runs are in the project's store nested under the study run, nothing is locked or mixed up,
    and a second study keeps every cell."""
    project, _ = reproduced
    dvc = str(BIN / "dvc")
    try:
        out = _study(project, "--jobs", "2")
    finally:
        run_any([dvc, "queue", "stop", "--kill"], project)    # no worker outlives the test
    report = json.loads((project / "reports/grid/grid.json").read_text())
    # the study's own sample of `dvc queue status` (every 5 s, each call a DVC start-up: on a
    # busy machine a short overlap can fall between two samples); the run times below decide
    assert 1 <= report["peak_running"] <= 2, out
    with (project / "reports/grid/grid.csv").open(newline="") as handle:
        rows = {r["experiment"]: r for r in csv.DictReader(handle)}
    assert set(rows) == CELLS and all(r["status"] == "done" for r in rows.values()), rows
    assert all(0 <= float(r["test.clip_f1"]) <= 1 for r in rows.values())
    assert (project / "reports/grid/heatmap.png").stat().st_size > 0
    assert "best test.clip_f1" in out
    for name in CELLS:
        log = run([dvc, "queue", "logs", name], project)
        assert "Stage 'evaluate'" in log or "Running stage 'evaluate'" in log, log
        assert "Running stage 'synth'" not in log and "database is locked" not in log, log
        assert "Running stage 'build'" in log, log
    shown = json.loads(run([dvc, "exp", "show", "--json"], project))
    windows = {run["name"]: run["data"]["params"]["params.yaml"]["data"]["build"]
               for rev in shown for exp in rev.get("experiments") or []
               for run in exp.get("revs") or [] if run.get("name") in CELLS}
    assert windows["grid-l500ms-s1024"]["long_window_s"] == 0.5
    assert windows["grid-l500ms-s1024"]["short_window"] == windows["grid-l500ms-s1024"]["n_fft"]

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (study,) = [r for r in runs if r.data.tags.get("leakpipe.stage") == "study"]
    assert study.data.metrics["best/test.clip_f1"] == max(
        float(r["test.clip_f1"]) for r in rows.values())
    for name in CELLS:
        mine = [r for r in runs if r.data.tags.get("dvc.exp_name") == name]
        assert mine and all(r.info.status == "FINISHED" for r in mine), name
        assert all(r.data.tags.get("mlflow.parentRunId") == study.info.run_id for r in mine)
        assert {r.data.tags["leakpipe.stage"] for r in mine} >= CELL_STAGES, name
    spans = [(min(r.info.start_time for r in runs if r.data.tags.get("dvc.exp_name") == name),
              max(r.info.end_time for r in runs if r.data.tags.get("dvc.exp_name") == name))
             for name in CELLS]
    assert min(end for _, end in spans) > max(start for start, _ in spans), spans  # at once

    again = _study(project, "--jobs", "2")          # the same commit: every cell is kept
    assert "2 cells kept from an earlier run" in again
    assert "Queued" not in run([dvc, "queue", "status"], project)
