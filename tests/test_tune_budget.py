"""The trial budget and dead workers: decisions, counts with retries, liveness, the claim lock."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from leakpipe.config import load_section
from leakpipe.tune.names import ATTR_REASON, ATTR_WORKER
from leakpipe.tune.study import (
    JOURNAL,
    RDB,
    FlockJournalLock,
    StorageSpec,
    open_storage,
    open_study,
    resolve_storage,
    study_name,
)
from leakpipe.tune.trial_budget import (
    ClaimLock,
    Decision,
    TrialBudget,
    budget_of,
    dead_trials,
    is_alive,
    next_step,
    reap,
    worker_record,
)
from tests.conftest import PARAMS

HOUR = datetime.timedelta(hours=1)
CODE = "0" * 64   # a package source digest (code_digest.package_digest's form)


@pytest.mark.parametrize(("budget", "n_trials", "expired", "decision"), [
    (TrialBudget(0, 0, 0), 3, False, Decision.RUN),
    (TrialBudget(2, 0, 0), 3, False, Decision.RUN),
    (TrialBudget(2, 1, 0), 3, False, Decision.WAIT),  # the last slot runs elsewhere
    (TrialBudget(3, 0, 0), 3, False, Decision.DONE),
    (TrialBudget(3, 0, 1), 3, False, Decision.RUN),   # a queued retry is run even at budget
    (TrialBudget(9, 0, 0), 0, False, Decision.RUN),   # 0 = no trial limit (timeout only)
    (TrialBudget(0, 0, 1), 3, True, Decision.DONE),   # past the timeout nothing starts
])
def test_next_step(budget: TrialBudget, n_trials: int, expired: bool,
                   decision: Decision) -> None:
    assert next_step(budget, n_trials, expired) is decision


def _trial(state: TrialState, number_attrs: dict | None = None,
           start: datetime.datetime | None = None, **system_attrs) -> optuna.trial.FrozenTrial:
    trial = create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None,
                         params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                         user_attrs=number_attrs or {}, system_attrs=system_attrs)
    trial.datetime_start = start or datetime.datetime.now()
    return trial


def test_budget_counts_a_retried_trial_once() -> None:
    trials = [_trial(TrialState.COMPLETE), _trial(TrialState.FAIL), _trial(TrialState.RUNNING,
              retry_history=[1]), _trial(TrialState.WAITING)]
    for number, trial in enumerate(trials):
        trial.number = number
    assert budget_of(trials) == TrialBudget(finished=1, running=1, waiting=1)


@pytest.fixture
def dead_record() -> dict:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    record = {"host": socket.gethostname(), "pid": proc.pid,
              "started": psutil.Process(proc.pid).create_time()}
    proc.wait()
    return record


def test_liveness_from_the_worker_record(dead_record: dict) -> None:
    assert is_alive(worker_record())
    assert not is_alive(dead_record)
    assert not is_alive({**worker_record(), "started": worker_record()["started"] - 5})  # reused


def test_dead_trials(dead_record: dict) -> None:
    now = datetime.datetime.now()
    trials = {
        "alive": _trial(TrialState.RUNNING, {ATTR_WORKER: worker_record()}),
        "dead": _trial(TrialState.RUNNING, {ATTR_WORKER: dead_record}),
        "elsewhere": _trial(TrialState.RUNNING, {ATTR_WORKER: {**dead_record, "host": "far"}}),
        "unrecorded_old": _trial(TrialState.RUNNING, start=now - HOUR),
        "unrecorded_new": _trial(TrialState.RUNNING, start=now),
        "finished": _trial(TrialState.COMPLETE, {ATTR_WORKER: dead_record}),
    }
    found = dead_trials(list(trials.values()), grace_s=60, now=now)
    assert [t for t in trials if trials[t] in found] == ["dead", "unrecorded_old"]


def test_reap_fails_and_requeues_a_dead_workers_trial(tmp_path: Path, dead_record) -> None:
    cfg = load_section(PARAMS, "tune")
    spec = StorageSpec(JOURNAL, str(tmp_path / "journal.log"))
    storage = open_storage(spec, cfg)
    study = open_study(storage, "s", cfg)
    study.add_trial(_trial(TrialState.COMPLETE))
    trial = study.ask()
    trial.suggest_float("train.dropout", 0.0, 0.5)
    trial.set_user_attr(ATTR_WORKER, dead_record)
    reaped = reap(study, storage, cfg)
    assert [t.number for t in reaped] == [1]
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING]
    assert "died" in trials[1].user_attrs[ATTR_REASON]
    assert trials[2].params == trials[1].params                     # same values again
    assert budget_of(trials) == TrialBudget(finished=1, running=0, waiting=1)
    assert reap(study, storage, cfg) == []                          # once only


LOCKS = {  # what a holder process takes, and how this process then takes the same lock
    "claim": ("lock = ClaimLock(StorageSpec(JOURNAL, {path!r}), 's'); lock.__enter__()",
              lambda path: ClaimLock(StorageSpec(JOURNAL, path), "s")),
    "journal_write": ("lock = FlockJournalLock({path!r}); lock.acquire()",
                      lambda path: _acquired(FlockJournalLock(path))),
}


@contextlib.contextmanager
def _acquired(lock: FlockJournalLock) -> Iterator[None]:
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _hold_lock(kind: str, path: str, seconds: float) -> subprocess.Popen:
    code = ("import time; from leakpipe.tune.trial_budget import ClaimLock; "
            "from leakpipe.tune.study import FlockJournalLock, StorageSpec, JOURNAL; "
            f"{LOCKS[kind][0].format(path=path)}; print('held', flush=True); "
            f"time.sleep({seconds})")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("kind", sorted(LOCKS))
@pytest.mark.parametrize("kill", [False, True])
def test_locks_exclude_other_processes_and_die_with_them(tmp_path: Path, kind: str,
                                                         kill: bool) -> None:
    path = str(tmp_path / "journal.log")
    holder = _hold_lock(kind, path, seconds=1.5)
    if kill:
        holder.kill()          # a SIGKILLed holder releases the lock at once
    start = time.monotonic()
    with LOCKS[kind][1](path):
        waited = time.monotonic() - start
    holder.wait()
    assert (waited < 1.0) if kill else (waited > 0.5)


def test_storage_resolution(monkeypatch, tmp_path: Path) -> None:
    cfg = load_section(PARAMS, "tune")
    monkeypatch.delenv("OPTUNA_STORAGE", raising=False)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    assert resolve_storage(cfg) == StorageSpec(JOURNAL, str(tmp_path / "tuning/journal.log"))
    url = "postgresql://tuner:secret@db.example:5432/optuna"
    monkeypatch.setenv("OPTUNA_STORAGE", url)
    spec = resolve_storage(cfg)      # the pinned driver (psycopg 3) is named for SQLAlchemy
    assert spec == StorageSpec(RDB, "postgresql+psycopg://tuner:secret@db.example:5432/optuna")
    assert spec.display == "postgresql+psycopg://***@db.example:5432/optuna"


def test_study_name_ignores_the_budget_but_not_the_space(tmp_path: Path) -> None:
    model, train = load_section(PARAMS, "model"), load_section(PARAMS, "train")
    cfg = load_section(PARAMS, "tune")
    data = tmp_path / "train.h5"
    data.write_bytes(b"abc")
    name = study_name(cfg, model, train, [data], code=CODE)
    assert study_name(dataclasses.replace(cfg, n_trials=50, workers=4), model, train,
                      [data], code=CODE) == name
    assert study_name(dataclasses.replace(cfg, epochs=3), model, train, [data],
                      code=CODE) != name
    # trials take epochs / compile from `tune`: the final training's values do not matter
    longer = dataclasses.replace(train, epochs=train.epochs + 5, compile=not train.compile)
    assert study_name(cfg, model, longer, [data], code=CODE) == name
    assert study_name(cfg, model, dataclasses.replace(train, seed=train.seed + 1),
                      [data], code=CODE) != name
    data.write_bytes(b"abd")
    assert study_name(cfg, model, train, [data], code=CODE) != name


def test_study_name_follows_the_code(tmp_path: Path) -> None:
    """Same params and data, other package source: another study (its trials measured other
    code); the digest is a required input, never silently left out."""
    model, train = load_section(PARAMS, "model"), load_section(PARAMS, "train")
    cfg = load_section(PARAMS, "tune")
    data = tmp_path / "train.h5"
    data.write_bytes(b"abc")
    name = study_name(cfg, model, train, [data], code=CODE)
    assert study_name(cfg, model, train, [data], code=CODE) == name
    assert study_name(cfg, model, train, [data], code="f" * 64) != name
    with pytest.raises(ValueError, match="source digest"):
        study_name(cfg, model, train, [data], code="")
