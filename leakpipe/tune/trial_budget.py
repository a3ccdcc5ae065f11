"""The trial budget across workers: claim a trial under a lock, retire trials whose worker died.

``n_trials`` is exact however many workers share a study: a worker counts the study's trials
and asks for a new one while holding a lock (a file lock beside a journal or SQLite file, an
advisory lock on PostgreSQL / MySQL), so two workers never both take the last slot.

A trial whose worker died (SIGKILL, OOM killer, lost machine) is failed and re-queued as a
WAITING trial with the same parameters (``RetryHeartbeatStaleTrialCallback``, up to
``tune.max_retry`` times); the original then no longer counts against the budget. Death is
seen from the worker record each trial carries (host, pid, process start time: exact on the
same host), from Optuna's heartbeats on an RDB storage (other hosts), and, for a trial that
never got a record, from its age (``tune.grace_s``).
"""

from __future__ import annotations

import datetime
import enum
import fcntl
import hashlib
import logging
import os
import socket
import threading
import warnings
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import optuna
import psutil
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages import RetryHeartbeatStaleTrialCallback as RetryStale
from optuna.trial import FrozenTrial, TrialState

from leakpipe.config import TuneConfig
from leakpipe.tune.names import ATTR_REASON, ATTR_WORKER
from leakpipe.tune.study import JOURNAL, StorageSpec

log = logging.getLogger(__name__)

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
START_TIME_TOLERANCE_S = 0.01
LOCK_SUFFIX = ".claim"
MYSQL_LOCK_NAME_CHARS = 40
ADVISORY_SQL = {  # dialect -> (acquire, release); released by the server if the client dies
    "postgresql": ("SELECT pg_advisory_lock(:key)", "SELECT pg_advisory_unlock(:key)"),
    "mysql": ("SELECT GET_LOCK(:key, -1)", "SELECT RELEASE_LOCK(:key)"),
}


class Decision(enum.Enum):
    RUN = "run"     # ask for a trial (a queued retry or a new one)
    WAIT = "wait"   # budget taken, but trials still run elsewhere (and may die)
    DONE = "done"


@dataclass(frozen=True)
class TrialBudget:
    """The study's trials that count: finished, running, queued (retried ones excluded)."""

    finished: int
    running: int
    waiting: int

    @property
    def taken(self) -> int:
        return self.finished + self.running + self.waiting


def superseded(trials: list[FrozenTrial]) -> set[int]:
    """Numbers of trials that a later (retry) trial replaces."""
    return {n for t in trials for n in t.system_attrs.get("retry_history", [])}


def budget_of(trials: list[FrozenTrial]) -> TrialBudget:
    replaced = superseded(trials)
    counted = [t for t in trials if t.number not in replaced]
    return TrialBudget(finished=sum(t.state in FINISHED for t in counted),
                  running=sum(t.state == TrialState.RUNNING for t in counted),
                  waiting=sum(t.state == TrialState.WAITING for t in counted))


def next_step(budget: TrialBudget, n_trials: int, expired: bool) -> Decision:
    """What a worker does next; ``n_trials == 0`` means no limit (a timeout-only budget)."""
    if expired:
        return Decision.DONE
    if budget.waiting or n_trials == 0 or budget.taken < n_trials:
        return Decision.RUN
    return Decision.WAIT if budget.running else Decision.DONE


# -- the claim lock -----------------------------------------------------------------------------

class ClaimLock:
    """Serialises "count the budget, then ask for a trial" across every worker of a study."""

    def __init__(self, spec: StorageSpec, study_name: str) -> None:
        self._path = _lock_path(spec)
        self._dialect = _dialect(spec.location) if spec.kind != JOURNAL else ""
        self._key: Any = None
        self._engine: Any = None
        self._held: Any = None
        self._thread_lock = threading.Lock()
        if self._path is None and self._dialect in ADVISORY_SQL:
            self._engine, self._key = _advisory_engine(spec.location, self._dialect, study_name)
        elif self._path is None:
            log.warning("no cross-process lock for %s storage: parallel workers may run up to "
                        "workers - 1 trials more than tune.n_trials", self._dialect or "this")

    def __enter__(self) -> ClaimLock:
        self._thread_lock.acquire()
        if self._path is not None:
            self._held = open(self._path, "a")  # closed in __exit__
            fcntl.flock(self._held, fcntl.LOCK_EX)
        elif self._engine is not None:
            self._held = self._engine.connect()
            self._held.execute(_sql(ADVISORY_SQL[self._dialect][0]), {"key": self._key})
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self._path is not None:
                fcntl.flock(self._held, fcntl.LOCK_UN)
            elif self._engine is not None:
                self._held.execute(_sql(ADVISORY_SQL[self._dialect][1]), {"key": self._key})
            if self._held is not None:
                self._held.close()
        finally:
            self._held = None
            self._thread_lock.release()


def _dialect(url: str) -> str:
    return url.split("://", 1)[0].split("+", 1)[0].lower()


def _lock_path(spec: StorageSpec) -> str | None:
    """A lock file beside a journal or an SQLite database file; None for server databases."""
    if spec.kind == JOURNAL:
        return spec.location + LOCK_SUFFIX
    prefix = "sqlite:///"
    if spec.location.startswith(prefix) and spec.location != prefix + ":memory:":
        return spec.location.removeprefix(prefix) + LOCK_SUFFIX
    return None


def _advisory_engine(url: str, dialect: str, study_name: str) -> tuple[Any, Any]:
    import sqlalchemy

    digest = hashlib.sha256(study_name.encode()).hexdigest()
    key: Any = int(digest[:15], 16) if dialect == "postgresql" else (
        f"leakpipe-{digest[:MYSQL_LOCK_NAME_CHARS]}")
    return sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool), key


def _sql(statement: str) -> Any:
    import sqlalchemy

    return sqlalchemy.text(statement)


# -- worker records and dead trials -------------------------------------------------------------

def worker_record() -> dict[str, Any]:
    """Who runs a trial: enough to tell, on this host, whether that process still lives."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "started": psutil.Process().create_time()}


def is_alive(record: dict[str, Any]) -> bool:
    """The recorded process still runs (same pid and start time; a zombie is dead)."""
    try:
        proc = psutil.Process(int(record["pid"]))
        same = abs(proc.create_time() - float(record["started"])) < START_TIME_TOLERANCE_S
        return same and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def dead_trials(trials: list[FrozenTrial], grace_s: float,
                now: datetime.datetime | None = None) -> list[FrozenTrial]:
    """RUNNING trials whose worker on this host died, or that never got a worker record."""
    now = now or datetime.datetime.now()
    host, dead = socket.gethostname(), []
    for trial in trials:
        if trial.state != TrialState.RUNNING:
            continue
        record = trial.user_attrs.get(ATTR_WORKER)
        if record is None:
            started = trial.datetime_start or now
            if (now - started).total_seconds() > grace_s:
                dead.append(trial)
        elif record.get("host") == host and not is_alive(record):
            dead.append(trial)
    return dead


def trial_id(storage: BaseStorage, study: optuna.Study, number: int) -> int:
    """The storage's id of trial ``number`` (public API only)."""
    study_id = storage.get_study_id_from_name(study.study_name)
    return storage.get_trial_id_from_study_id_trial_number(study_id, number)


def retire(study: optuna.Study, storage: BaseStorage, number: int, reason: str,
           max_retry: int) -> bool:
    """Fail a trial whose worker is gone and queue a retry of it; False if it had ended."""
    tid = trial_id(storage, study, number)
    try:
        storage.set_trial_user_attr(tid, ATTR_REASON, reason)
        if not storage.set_trial_state_values(tid, TrialState.FAIL):
            return False
    except UpdateFinishedTrialError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        RetryStale(max_retry=max_retry)(study, storage.get_trial(tid))
    log.warning("trial %d: %s; failed it and queued a retry", number, reason)
    return True


def reap(study: optuna.Study, storage: BaseStorage, cfg: TuneConfig) -> list[FrozenTrial]:
    """Retire every trial whose worker died; returns them (their MLflow runs are closed)."""
    trials = study.get_trials(deepcopy=False)
    reaped = [t for t in dead_trials(trials, cfg.grace_s)
              if retire(study, storage, t.number, _death_reason(t), cfg.max_retry)]
    if isinstance(storage, RDBStorage):
        running = {t.number for t in trials if t.state == TrialState.RUNNING}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # heartbeats: workers on other hosts
        reaped += [t for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                   if t.number in running and t.number not in {r.number for r in reaped}]
    return reaped


def _death_reason(trial: FrozenTrial) -> str:
    record = trial.user_attrs.get(ATTR_WORKER)
    if record is None:
        return "its worker died before recording itself"
    return f"worker pid {record['pid']} on {record['host']} died"
