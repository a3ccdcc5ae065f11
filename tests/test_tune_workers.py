"""Worker processes on one study, real storages (journal file, SQLite): exact budget, SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from leakpipe.tune.driver import run_study
from leakpipe.tune.names import ATTR_REASON, ATTR_WORKER, TAG_TRIAL
from leakpipe.tune.trial_budget import budget_of
from tests.helpers_detector import copied_store
from tests.helpers_tune import TuneWorkspace, make_workspace, worker_command

N_TRIALS = 4
POLL_S = 0.05
WAIT_S = 120.0


def _workspace(tmp_path: Path, storage: str, **tune) -> TuneWorkspace:
    url = f"sqlite:///{tmp_path / 'optuna.db'}" if storage == "sqlite" else ""
    return make_workspace(tmp_path, tune={"storage": url, **tune})


@pytest.fixture(autouse=True)
def _no_env_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPTUNA_STORAGE", raising=False)


# Each storage once with two concurrent workers (a few seconds of torch start-up each): the
# journal file finishing the budget with MLflow logged from the workers, SQLite finishing it
# after one worker is SIGKILLed (the other takes the rest), PostgreSQL below.
@pytest.mark.slow
def test_two_workers_finish_exactly_the_budget(tmp_path, monkeypatch) -> None:
    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    ws = _workspace(tmp_path, "journal", n_trials=N_TRIALS, pruner="none")
    run_study(ws.params, ws.paths, workers=2, progress=False, tracked=True)
    trials = ws.study().get_trials()
    assert sorted(t.number for t in trials) == list(range(N_TRIALS))
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs[ATTR_WORKER]["pid"] for t in trials}) >= 1
    assert ws.paths.best.is_file()
    runs = MlflowClient(uri).search_runs(
        [e.experiment_id for e in MlflowClient(uri).search_experiments()])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1
    assert sorted(int(r.data.tags[TAG_TRIAL]) for r in children) == list(range(N_TRIALS))
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)


def _fresh_trial_of(study: optuna.Study, pid: int) -> bool:
    """``pid`` runs a trial that has not finished its first epoch (a kill lands mid-trial)."""
    return any(t.user_attrs.get(ATTR_WORKER, {}).get("pid") == pid and not t.intermediate_values
               for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


@pytest.mark.slow
def test_sigkill_of_a_worker_leaves_the_study_usable_and_complete(tmp_path) -> None:
    ws = _workspace(tmp_path, "sqlite", n_trials=4, epochs=2, pruner="none")
    study = ws.study()
    workers = [subprocess.Popen(worker_command(ws, i)) for i in (1, 2)]
    try:
        _wait_for(lambda: _fresh_trial_of(study, workers[0].pid), "worker 1 to start a trial")
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        assert workers[1].wait(timeout=WAIT_S) == 0      # the other worker finishes the study
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
    trials = ws.study().get_trials()
    budget = budget_of(trials)
    assert (budget.finished, budget.running, budget.waiting) == (4, 0, 0)
    killed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(killed) == 1
    assert f"worker pid {workers[0].pid}" in killed[0].user_attrs[ATTR_REASON]
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == killed[0].number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE
    assert killed[0].params.items() <= retry[0].params.items()   # what was chosen is kept
    summary = run_study(ws.params, ws.paths, progress=False, tracked=False)  # storage usable
    assert summary.counts == {"COMPLETE": 4, "FAIL": 1} and summary.retried == 1
    assert len(ws.study().get_trials()) == 5


@pytest.mark.slow
def test_two_workers_on_postgresql_finish_exactly_the_budget(tmp_path, monkeypatch,
                                                             postgres_url: str) -> None:
    """A real PostgreSQL server (tests/conftest.py), as several machines would share it; the
    URL names no driver, as users write it."""
    monkeypatch.setenv("OPTUNA_STORAGE", postgres_url)   # advisory lock + heartbeats
    ws = make_workspace(tmp_path, tune={"n_trials": N_TRIALS, "pruner": "none"})
    run_study(ws.params, ws.paths, workers=2, progress=False, tracked=False)
    trials = ws.study().get_trials()
    assert sorted(t.number for t in trials) == list(range(N_TRIALS))
    assert all(t.state == TrialState.COMPLETE for t in trials)
