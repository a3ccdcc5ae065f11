"""Fault injection with real processes, signals, checkpoints, MLflow SQLite stores and DVC.

* SIGKILL of the train stage at step offsets drawn from a seeded RNG and inside checkpoint
  writes (``leakpipe.files``' write-pause test hook holds the process between the fsynced
  temporary file and its rename): every re-run resumes, no checkpoint is ever unreadable, and
  the last re-run ends exactly like an uninterrupted run.
* Two processes starting runs and logging metrics into one SQLite MLflow store at once.

Four queued DVC experiments run two at a time (all finish, each logs its runs into the project's
own store, no "database is locked") are the segmentation-grid study's test:
tests/test_pipeline_grid.py::test_segmentation_grid_runs_queued_experiments_two_at_a_time.

A SIGKILLed tune worker (the study still ends with exactly its trial budget) is covered by
tests/test_tune_workers.py::test_sigkill_of_a_worker_leaves_the_study_usable_and_complete; the
SIGINT / SIGTERM cases of the train stage by
tests/test_train_signals.py::test_signal_checkpoints_mid_epoch_and_the_rerun_ends_the_same.
SIGKILL of the train stage is tested here only (the seeded kills above; test_train_signals'
own SIGKILL test was dropped as redundant with them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import mlflow
import numpy as np
import pytest

from leakpipe.files import TEST_WRITE_PAUSE_ENV, TEST_WRITE_PAUSE_MARK, temporary_sibling
from leakpipe.tracking import TAG_STAGE
from leakpipe.train import checkpoint as ck
from leakpipe.train.stage import TAG_PREVIOUS_RUN
from tests import test_train_signals
from tests.test_train_signals import (
    STAGE,
    WAIT_S,
    Reference,
    _assert_same_result,
    _batches_per_epoch,
    _env,
    _with_params,
)
from tests.test_train_stage import (
    Workspace,
    fresh_mlflow_uri,
    mlflow_runs,
    read_metrics,
    stage_args,
)

# The signal tests' uninterrupted run of the stage: built once per session for both modules.
reference = test_train_signals.reference

# ---------------------------------------------------------------------------------------------
# SIGKILL of the train stage: seeded random steps and inside checkpoint writes
# ---------------------------------------------------------------------------------------------

SEED = 20261124
PAUSE_S = 60.0    # a paused write waits this long for its kill (which follows within milliseconds)
STEP_RE = re.compile(r"epoch (\d+) step (\d+):")
MARK_RE = re.compile(rf"^{re.escape(TEST_WRITE_PAUSE_MARK)} (\S+) -> (\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class Kill:
    """SIGKILL once the log shows (epoch, step), or inside the attempt's first checkpoint write
    (the write hook paused it between the fsynced temporary file and the rename), which is
    epoch ``write_epoch``'s."""

    at: tuple[int, int] | None = None
    write_epoch: int | None = None


def _kill_plan(steps: int) -> list[Kill]:
    """Three step offsets from a seeded RNG (one in epoch 0, where nothing is saved yet and the
    re-run starts over; two in epoch 1, where it resumes from epoch-0000.pt) and, between the
    two in epoch 1, a kill inside the first checkpoint write at the end of epoch 1."""
    rng = np.random.default_rng(SEED)
    first = int(rng.integers(1, steps))
    second, third = sorted(int(k) for k in rng.integers(1, steps, size=2))
    return [Kill(at=(0, first)), Kill(at=(1, second)), Kill(write_epoch=1), Kill(at=(1, third))]


def _attempt(ws: Workspace, uri: str, kill: Kill) -> str:
    """Run the stage until ``kill`` says so, SIGKILL it; its stderr."""
    env = _stage_env(ws, uri)
    if kill.write_epoch is not None:
        env[TEST_WRITE_PAUSE_ENV] = str(PAUSE_S)
    proc = subprocess.Popen([sys.executable, str(STAGE), *stage_args(ws)], env=env, cwd=ws.root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if _due(kill, line):
                proc.kill()
                break
        _, rest = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(seen) + rest
    assert proc.returncode == -9, f"{kill} never came:\n{err[-3000:]}"
    return err


def _stage_env(ws: Workspace, uri: str) -> dict[str, str]:
    """The signal tests' environment; MLflow artifacts under the workspace, no write pause."""
    env = {**_env(uri), "DVC_ROOT": str(ws.root)}
    env.pop(TEST_WRITE_PAUSE_ENV, None)
    return env


def _due(kill: Kill, line: str) -> bool:
    if kill.write_epoch is not None:
        return line.startswith(TEST_WRITE_PAUSE_MARK)
    found = STEP_RE.search(line)
    return found is not None and (int(found[1]), int(found[2])) >= kill.at


def _readable_checkpoints(ws: Workspace) -> dict[str, int]:
    """Every checkpoint a run could read (hidden temporary files aside) loads: name -> epoch."""
    if not ws.checkpoints.is_dir():
        return {}
    return {p.name: int(ck.load_checkpoint(p)["epoch"])
            for p in sorted(ws.checkpoints.glob("*.pt")) if not p.name.startswith(".")}


@pytest.mark.slow
def test_seeded_sigkills_and_kills_inside_checkpoint_writes_end_like_an_uninterrupted_run(
        reference: Reference) -> None:
    ws = _with_params(reference.ws, "faults", log_every_steps=1)
    uri = fresh_mlflow_uri(ws.root / "faults-mlflow")
    plan = _kill_plan(_batches_per_epoch(ws))
    for kill in plan:
        err = _attempt(ws, uri, kill)
        assert not ws.model.exists() and not (ws.checkpoints / ck.FINISHED_NAME).exists()
        saved = _readable_checkpoints(ws)                        # never an unreadable one
        if kill.write_epoch is None:
            assert TEST_WRITE_PAUSE_MARK not in err              # the hook is inert when unset
            continue
        # killed between the fsynced temporary file and its rename: the target is the old
        # file (an earlier epoch's) or none, the whole new one waits in the temporary file
        ((tmp, target),) = [(Path(a), Path(b)) for a, b in MARK_RE.findall(err)]
        assert target.parent == ws.checkpoints and tmp == temporary_sibling(target)
        assert ck.load_checkpoint(tmp)["epoch"] == kill.write_epoch
        assert saved.get(target.name, -1) < kill.write_epoch, (target.name, saved)
    _finish_and_compare(ws, uri, reference, kills=len(plan))


def _finish_and_compare(ws: Workspace, uri: str, ref: Reference, kills: int) -> None:
    done = subprocess.run([sys.executable, str(STAGE), *stage_args(ws)],
                          env=_stage_env(ws, uri), cwd=ws.root, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_metrics(ws)["epochs_this_run"] == 1             # resumed from epoch-0000.pt
    _assert_same_result(ws, ref.ws)
    assert set(_readable_checkpoints(ws)) == {ck.BEST_NAME, "epoch-0000.pt", "epoch-0001.pt"}
    assert not [p.name for p in ws.checkpoints.iterdir() if p.name.endswith(".tmp")]
    runs = mlflow_runs(uri)                                     # one per attempt, linked
    assert len(runs) == kills + 1
    assert [r.info.status for r in runs] == ["KILLED"] * kills + ["FINISHED"]
    for before, after in pairwise(runs):
        assert after.data.tags[TAG_PREVIOUS_RUN] == before.info.run_id


# ---------------------------------------------------------------------------------------------
# Two processes, one SQLite MLflow store
# ---------------------------------------------------------------------------------------------

LOG_STEPS = 60
LOG_METRICS = 5
_LOGGER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import mlflow
    from leakpipe import tracking
    ready, go, stage, steps, width = sys.argv[1:6]
    mlflow.MlflowClient(tracking.tracking_uri()).search_experiments()   # the store is open
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.001)
    with tracking.start_run(stage) as run:
        for step in range(int(steps)):
            run.log_metrics({f"m{k}": step * 10.0 + k for k in range(int(width))}, step=step)
""")


def test_two_processes_log_to_one_sqlite_store_at_once(tmp_path: Path) -> None:
    """Both start a run the same millisecond in a store that has no leakpipe experiment yet
    (both look it up, both create it: the loser used to fail on the unique name), then log
    metrics at once; every metric of both runs arrives, nothing is locked out."""
    uri = fresh_mlflow_uri(tmp_path / "store")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(MLFLOW_TRACKING_URI=uri, DVC_ROOT=str(tmp_path))
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _LOGGER, str(tmp_path / f"ready{i}"),
                               str(go), f"logger{i}", str(LOG_STEPS), str(LOG_METRICS)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    try:
        deadline = time.monotonic() + WAIT_S
        while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline, "the loggers never got ready"
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=WAIT_S) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert "database is locked" not in err
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = mlflow_runs(uri)
    assert sorted(r.data.tags[TAG_STAGE] for r in runs) == ["logger0", "logger1"]
    assert len({r.info.experiment_id for r in runs}) == 1
    assert all(r.info.status == "FINISHED" for r in runs)
    first, second = runs
    assert second.info.start_time < first.info.end_time          # they did overlap
    for run in runs:
        for k in range(LOG_METRICS):
            history = client.get_metric_history(run.info.run_id, f"m{k}")
            assert sorted((m.step, m.value) for m in history) == [
                (s, s * 10.0 + k) for s in range(LOG_STEPS)]
