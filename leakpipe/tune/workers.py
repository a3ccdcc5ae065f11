"""Workers: the claim -> train -> tell loop, and N local worker processes on one study.

A worker loops: under the claim lock it retires trials whose worker died, counts the budget
and asks for a trial (a queued retry first); it trains the trial (``run_trial``) while a
heartbeat thread beats (RDB storages) and tells the study how it ended. A trial that raises one
of ``TRIAL_ERRORS`` is recorded FAIL with its reason and the worker goes on; any other error is
recorded FAIL and stops the worker; an interrupted trial is failed and queued again.
``leakpipe tune --workers N`` starts N such loops as ``leakpipe tune --worker`` processes, the
same command a worker on another machine runs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState
from tqdm import tqdm

from leakpipe import tracking
from leakpipe.tune.names import ATTR_REASON, ATTR_RUN_ID, ATTR_WORKER
from leakpipe.tune.objective import (
    TRIAL_ERRORS,
    Outcome,
    TrialInputs,
    failure_reason,
    run_trial,
)
from leakpipe.tune.trial_budget import (
    ClaimLock,
    Decision,
    budget_of,
    next_step,
    reap,
    retire,
    trial_id,
    worker_record,
)

HEARTBEAT_OUTSIDE_OPTIMIZE = "Heartbeat of storage is supposed to be used with Study.optimize"
log = logging.getLogger(__name__)

POLL_S = 2.0                 # seconds between looks at the study while waiting
STOP_GRACE_S = 30.0          # seconds workers get to finish after an interrupt
WORKER_COMMAND = ("-m", "leakpipe.cli", "tune", "--worker")
INTERRUPTED = "interrupted (SIGINT); queued again"


@dataclass
class Worker:
    """One worker's handle on the study."""

    study: optuna.Study
    storage: BaseStorage
    lock: ClaimLock
    inputs: TrialInputs
    deadline: float | None = None   # time.monotonic() after which no trial starts

    @property
    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def worker_loop(worker: Worker, on_trial: Callable[[], None] | None = None) -> int:
    """Run trials until the budget is taken and nothing runs elsewhere; returns trials run."""
    ran = 0
    while True:
        claimed = claim(worker)
        if claimed is Decision.DONE:
            return ran
        if claimed is Decision.WAIT:
            time.sleep(POLL_S)
            continue
        run_one(worker, claimed)
        ran += 1
        if on_trial is not None:
            on_trial()


def claim(worker: Worker) -> optuna.Trial | Decision:
    """Under the lock: retire dead trials, then take a trial if the budget allows."""
    cfg, study = worker.inputs.tune, worker.study
    with worker.lock:
        for dead in reap(study, worker.storage, cfg):
            close_run(dead)
        decision = next_step(budget_of(study.get_trials(deepcopy=False)), cfg.n_trials,
                          worker.expired)
        if decision is not Decision.RUN:
            return decision
        with warnings.catch_warnings():
            # Optuna warns when heartbeats run outside Study.optimize; here this loop beats
            # itself (``heartbeat`` below), which is what the warning asks for
            warnings.filterwarnings("ignore", HEARTBEAT_OUTSIDE_OPTIMIZE, UserWarning)
            trial = study.ask()
        trial.set_user_attr(ATTR_WORKER, worker_record())
        if trial.user_attrs.get(ATTR_REASON):
            trial.set_user_attr(ATTR_REASON, "")  # a retry: the copied reason is not its own
        if isinstance(worker.storage, RDBStorage):
            worker.storage.record_heartbeat(trial_id(worker.storage, study, trial.number))
    return trial


def run_one(worker: Worker, trial: optuna.Trial) -> None:
    """Train one trial and record how it ended."""
    tid = trial_id(worker.storage, worker.study, trial.number)
    with heartbeat(worker.storage, tid, worker.inputs.tune.heartbeat_s):
        try:
            outcome = run_trial(trial, worker.inputs)
        except TRIAL_ERRORS as exc:
            fail(worker.study, trial, failure_reason(exc))
            return
        except KeyboardInterrupt:
            retire(worker.study, worker.storage, trial.number, INTERRUPTED,
                   worker.inputs.tune.max_retry)
            raise
        except BaseException as exc:
            fail(worker.study, trial, failure_reason(exc))
            raise
    tell(worker.study, trial, outcome, worker.inputs.tune.objective)


def fail(study: optuna.Study, trial: optuna.Trial, reason: str) -> None:
    trial.set_user_attr(ATTR_REASON, reason)
    study.tell(trial, state=TrialState.FAIL)
    log.warning("trial %d FAIL: %s", trial.number, reason)


def tell(study: optuna.Study, trial: optuna.Trial, outcome: Outcome, objective: str) -> None:
    if outcome.state == TrialState.COMPLETE:
        study.tell(trial, outcome.value)
        log.info("trial %d COMPLETE: %s = %.4f after %d epochs", trial.number, objective,
                 outcome.value, outcome.epochs)
        return
    trial.set_user_attr(ATTR_REASON, outcome.reason)
    study.tell(trial, state=TrialState.PRUNED)
    log.info("trial %d PRUNED: %s", trial.number, outcome.reason)


def close_run(trial: FrozenTrial) -> None:
    """A dead worker's MLflow child run stays RUNNING unless someone closes it."""
    run_id = trial.user_attrs.get(ATTR_RUN_ID)
    if run_id:
        tracking.end_run_by_id(run_id, "KILLED")


@contextlib.contextmanager
def heartbeat(storage: BaseStorage, tid: int, interval_s: float) -> Iterator[None]:
    """Beat every ``interval_s`` while the trial runs (RDB storages; journals use pids)."""
    if not isinstance(storage, RDBStorage):
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=_beat, args=(storage, tid, interval_s, stop),
                              name="leakpipe-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _beat(storage: RDBStorage, tid: int, interval_s: float, stop: threading.Event) -> None:
    while not stop.wait(interval_s):
        storage.record_heartbeat(tid)


# -- progress and local worker processes --------------------------------------------------------

class Progress:
    """A bar over the study's finished trials with the best value so far."""

    def __init__(self, study: optuna.Study, n_trials: int, enabled: bool) -> None:
        self.study = study
        done = budget_of(study.get_trials(deepcopy=False)).finished   # a resumed study
        self.bar = tqdm(total=n_trials or None, initial=done, desc="tune", unit="trial",
                        disable=not enabled, dynamic_ncols=True)
        self.refresh()

    def refresh(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        self.bar.n = budget_of(trials).finished
        best = best_value(self.study, trials)
        self.bar.set_postfix_str("best -" if best is None else f"best {best:.4f}",
                                 refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def best_value(study: optuna.Study, trials: Sequence[FrozenTrial]) -> float | None:
    values = [t.value for t in trials
              if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)]
    if not values:
        return None
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    return max(values) if maximize else min(values)


def spawn_workers(n: int, threads: int, args: Sequence[str]) -> list[subprocess.Popen]:
    """N ``leakpipe tune --worker`` processes (indices 1..N) with ``threads`` torch threads."""
    return [subprocess.Popen([sys.executable, *WORKER_COMMAND, "--worker-index", str(i + 1),
                              "--threads", str(threads), "--no-progress", *args])
            for i in range(n)]


def supervise(procs: Sequence[subprocess.Popen], progress: Progress) -> list[int]:
    """Wait for the workers, refreshing the bar; on Ctrl-C interrupt them too."""
    try:
        while any(p.poll() is None for p in procs):
            progress.refresh()
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        stop_workers(procs)
        raise
    progress.refresh()
    return [p.returncode for p in procs]


def stop_workers(procs: Sequence[subprocess.Popen]) -> None:
    """SIGINT (each fails and re-queues its trial), then SIGKILL after ``STOP_GRACE_S``."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
