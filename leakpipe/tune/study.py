"""The study: where it is stored, what it is called, how it samples and prunes.

Storage: ``OPTUNA_STORAGE`` if set, else ``tune.storage``, else a journal file (default
``tuning/journal.log``, anchored on the repo root: ``DVC_ROOT`` under DVC). A journal file needs
no server and is safe for several processes on one host; an RDB URL (PostgreSQL / MySQL) serves
workers on many machines and gets Optuna's heartbeats (a trial whose worker stops beating for
``tune.grace_s`` is failed and re-queued up to ``tune.max_retry`` times).

Name: ``<tune.study_name>-<hash>``, the hash over the `model`, `train` (but the keys trials take
from `tune`: ``TRIAL_OVERRIDES``) and `tune` params (not the budget or the storage), the train /
val files and the package's source digest (``leakpipe.code_digest``). Re-running with a larger
budget resumes the study; changing the space, the trial epochs, the data or the code starts a
new one in the same storage: trials that other code finished measured that code, not this one.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages import RetryHeartbeatStaleTrialCallback as RetryStale
from optuna.storages.journal import JournalFileBackend

from leakpipe.config import DecisionConfig, ModelConfig, TrainConfig, TuneConfig
from leakpipe.config.training import without_added_defaults
from leakpipe.db_urls import redacted, with_driver
from leakpipe.errors import LeakpipeError
from leakpipe.files import file_sha256
from leakpipe.paths import repo_root
from leakpipe.tune.names import OBJECTIVE_DIRECTIONS, TRIAL_OVERRIDES

log = logging.getLogger(__name__)

STORAGE_ENV = "OPTUNA_STORAGE"
DEFAULT_JOURNAL = Path("tuning/journal.log")
JOURNAL = "journal"
RDB = "rdb"
# `tune` keys that change how much is run or where, never what a trial measures.
BUDGET_KEYS = ("study_name", "storage", "n_trials", "timeout_s", "workers",
               "threads_per_worker", "heartbeat_s", "grace_s", "max_retry")
HASH_CHARS = 10
WRITE_LOCK_SUFFIX = ".wlock"


class TuneError(LeakpipeError):
    """The study cannot run or produced nothing usable; the message says what to do."""


@dataclass(frozen=True)
class StorageSpec:
    """Which storage a study lives in: a journal file path or an RDB URL."""

    kind: str         # JOURNAL | RDB
    location: str     # the journal's absolute path, or the URL

    @property
    def display(self) -> str:
        """The location without a password (for logs and MLflow tags)."""
        return self.location if self.kind == JOURNAL else redacted(self.location)


def resolve_direction(cfg: TuneConfig) -> str:
    """'maximize' / 'minimize': the configured one, or the objective's natural one."""
    return OBJECTIVE_DIRECTIONS[cfg.objective] if cfg.direction == "auto" else cfg.direction


def resolve_storage(cfg: TuneConfig, journal: Path = DEFAULT_JOURNAL) -> StorageSpec:
    """``OPTUNA_STORAGE``, else ``tune.storage``, else the journal file under the repo root."""
    url = os.environ.get(STORAGE_ENV) or cfg.storage
    if url:
        return StorageSpec(RDB, with_driver(url))
    path = journal if journal.is_absolute() else repo_root() / journal
    return StorageSpec(JOURNAL, str(path))


class FlockJournalLock:
    """The journal's write lock as a kernel file lock: a killed writer releases it at once.

    Optuna's default (symlink) lock outlives a SIGKILLed holder and is broken only after its
    30 s grace period. ``flock`` locks die with their process; they need a local file system
    (a journal is for one host).
    """

    def __init__(self, journal: str) -> None:
        self._path = journal + WRITE_LOCK_SUFFIX
        self._threads = threading.Lock()
        self._file: IO[str] | None = None

    def acquire(self) -> bool:
        self._threads.acquire()
        self._file = open(self._path, "a")  # closed by release()
        fcntl.flock(self._file, fcntl.LOCK_EX)
        return True

    def release(self) -> None:
        try:
            if self._file is not None:
                fcntl.flock(self._file, fcntl.LOCK_UN)
                self._file.close()
        finally:
            self._file = None
            self._threads.release()


def open_storage(spec: StorageSpec, cfg: TuneConfig) -> BaseStorage:
    """The Optuna storage object; RDB storages get heartbeats and stale-trial retries."""
    if spec.kind == JOURNAL:
        Path(spec.location).parent.mkdir(parents=True, exist_ok=True)
        backend = JournalFileBackend(spec.location, lock_obj=FlockJournalLock(spec.location))
        return JournalStorage(backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return RDBStorage(spec.location, heartbeat_interval=cfg.heartbeat_s,
                          grace_period=cfg.grace_s,
                          heartbeat_stale_trial_callback=RetryStale(max_retry=cfg.max_retry))


def study_name(cfg: TuneConfig, model: ModelConfig, train: TrainConfig,
               data: Sequence[Path], decision: DecisionConfig | None = None, *,
               code: str) -> str:
    """``<study_name>-<hash of what the trials measure>``.

    ``code`` is the package's source digest (``code_digest.package_digest()``; a parameter so
    the name stays a pure function of its inputs): the same params and data under other code
    name another study, so ``dvc repro`` after a code change never reports trials the old code
    finished as this code's. ``decision`` (how val decides files: the val F1 a trial reports)
    joins the hash when given. Keys added to `model` / `train` later join it only when they
    change what a trial does.
    """
    if not code:
        raise ValueError("study_name: code must be the package's source digest, not empty")
    tune = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in BUDGET_KEYS}
    trial_train = {k: v for k, v in dataclasses.asdict(train).items() if k not in TRIAL_OVERRIDES}
    identity = {"model": without_added_defaults("model", dataclasses.asdict(model)),
                "train": without_added_defaults("train", trial_train),
                "tune": tune, "data": [file_sha256(p) for p in data], "code": code}
    if decision is not None:
        identity["decision"] = dataclasses.asdict(decision)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    return f"{cfg.study_name}-{digest.hexdigest()[:HASH_CHARS]}"


def make_sampler(cfg: TuneConfig, worker_index: int, offset: int) -> optuna.samplers.TPESampler:
    """TPE seeded from ``tune.seed``, the worker and the trials already there (no repeats)."""
    seed = np.random.SeedSequence([cfg.seed, worker_index, offset]).generate_state(1)[0]
    return optuna.samplers.TPESampler(seed=int(seed), n_startup_trials=cfg.sampler_startup_trials)


def make_pruner(cfg: TuneConfig) -> optuna.pruners.BasePruner:
    if cfg.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=cfg.pruner_startup_trials,
                                           n_warmup_steps=cfg.pruner_warmup_steps)
    if cfg.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=cfg.epochs,
                                              reduction_factor=cfg.hyperband_reduction_factor)
    return optuna.pruners.NopPruner()


def open_study(storage: BaseStorage, name: str, cfg: TuneConfig, *, worker_index: int = 0,
               create: bool = True) -> optuna.Study:
    """Create or load the study; ``create=False`` (a joining worker) needs it to exist."""
    if not create and name not in optuna.get_all_study_names(storage):
        raise TuneError(f"study {name!r} is not in the storage; start it with `leakpipe tune` "
                        "(or `dvc repro tune`) with the same params, data and code first")
    study = optuna.create_study(storage=storage, study_name=name,
                                direction=resolve_direction(cfg),
                                sampler=make_sampler(cfg, worker_index, 0),
                                pruner=make_pruner(cfg), load_if_exists=True)
    study.sampler = make_sampler(cfg, worker_index, len(study.get_trials(deepcopy=False)))
    name_objective(study, cfg.objective)
    return study


def name_objective(study: optuna.Study, objective: str) -> None:
    """Store the objective's name (``val/clip_f1``) as the study's metric name, once: Optuna's
    plots and optuna-dashboard show it instead of "Objective 0". The study name hashes the
    objective, so a study resumed under these params measures this one (a study started before
    leakpipe named it gets its name on its next run)."""
    if study.metric_names is None:
        with warnings.catch_warnings():      # experimental since Optuna 3.2, stable in use
            warnings.simplefilter("ignore", ExperimentalWarning)
            study.set_metric_names([objective])
