"""The `tune` stage: run the study to its budget with N workers, then write what it found.

``run_tune`` (the stage, ``leakpipe tune``) runs ``run_study`` and prints what it found;
``run_study`` creates or resumes the study, opens (or reopens)
its MLflow parent run, runs one worker in this process or N worker processes, and writes
tuning/best_params.yaml and metrics/tune.json. ``join_study`` (``leakpipe tune --worker``) is
one worker on a study that already exists, on this machine or another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import torch

from leakpipe import tracking
from leakpipe.code_digest import package_digest
from leakpipe.config import (
    DecisionConfig,
    ModelConfig,
    RuntimeConfig,
    TrainConfig,
    TuneConfig,
    load_section,
)
from leakpipe.data.stamp import DEFAULT_STAMP, SplitTrust, trust_splits
from leakpipe.preload.plan import read_plan
from leakpipe.tune import plots, study_results
from leakpipe.tune.names import ATTR_PARENT_RUN, TAG_STORAGE, TAG_STUDY
from leakpipe.tune.objective import TrialInputs
from leakpipe.tune.space import check_space
from leakpipe.tune.study import (
    BUDGET_KEYS,
    DEFAULT_JOURNAL,
    StorageSpec,
    TuneError,
    open_storage,
    open_study,
    resolve_storage,
    study_name,
)
from leakpipe.tune.trial_budget import ClaimLock, Decision, budget_of, next_step
from leakpipe.tune.workers import Progress, Worker, spawn_workers, supervise, worker_loop

log = logging.getLogger(__name__)

STAGE = "tune"


@dataclass(frozen=True)
class TunePaths:
    """Every file the stage reads or writes (dvc.yaml passes them)."""

    train: Path
    val: Path
    plan: Path
    journal: Path = DEFAULT_JOURNAL
    best: Path = Path("tuning/best_params.yaml")
    metrics: Path = Path("metrics/tune.json")
    validated: Path | None = DEFAULT_STAMP   # the validation stamp; None: --unvalidated

    def splits(self) -> dict[str, Path]:
        return {"train": self.train, "val": self.val}

    def trust(self) -> SplitTrust:
        """Check train / val against the stamp (the tags that record how, the hashes)."""
        return trust_splits(self.validated, self.splits())


@dataclass(frozen=True)
class Setup:
    """The loaded params, the storage and the study name."""

    model: ModelConfig
    train: TrainConfig
    tune: TuneConfig
    spec: StorageSpec
    name: str
    runtime: RuntimeConfig
    decision: DecisionConfig

    def inputs(self, paths: TunePaths, parent_run_id: str | None) -> TrialInputs:
        return TrialInputs(train_path=paths.train, val_path=paths.val,
                           plan=read_plan(paths.plan), model=self.model, train=self.train,
                           tune=self.tune, study_name=self.name, parent_run_id=parent_run_id,
                           runtime=self.runtime, decision=self.decision)


def load_setup(params: Path, paths: TunePaths, name: str | None = None) -> Setup:
    """The params, the storage and the study's name: ``name`` (``--study``) or the one computed
    from the params, the data and this package's source digest (other code, another study)."""
    model, train = load_section(params, "model"), load_section(params, "train")
    cfg, decision = load_section(params, "tune"), load_section(params, "decision")
    check_space(model, train, cfg, str(params))
    name = name or study_name(cfg, model, train, [paths.train, paths.val], decision,
                              code=package_digest())
    return Setup(model, train, cfg, resolve_storage(cfg, paths.journal), name,
                 runtime=load_section(params, "runtime"), decision=decision)


def threads_for(workers: int, cfg: TuneConfig) -> int:
    cores = len(os.sched_getaffinity(0))
    return cfg.threads_per_worker or max(1, cores // workers)


def deadline(cfg: TuneConfig) -> float | None:
    return time.monotonic() + cfg.timeout_s if cfg.timeout_s > 0 else None


def run_tune(params: Path, paths: TunePaths, *, workers: int | None = None,
             progress: bool = True) -> int:
    """The whole stage; returns the exit code (errors raise ``LeakpipeError``)."""
    summary = run_study(params, paths, workers=workers, progress=progress)
    print(f"tune: study {summary.study_name}: best {summary.objective} = "
          f"{summary.best_value:.4f} (trial {summary.best_trial}); trials {summary.counts} "
          f"-> {paths.best}; apply with `leakpipe tune apply`")
    return 0


def run_study(params: Path, paths: TunePaths, *, workers: int | None = None,
              progress: bool = True, tracked: bool = True) -> study_results.StudySummary:
    """Run (or resume) the study to its budget and write best_params.yaml and tune.json."""
    began = time.time()                    # a new parent run starts with the stage's work
    setup = load_setup(params, paths)
    trust = paths.trust()
    workers = workers or setup.tune.workers
    storage = open_storage(setup.spec, setup.tune)
    study = open_study(storage, setup.name, setup.tune)
    log.info("study %s in %s: %d trials so far, %d worker(s)", setup.name, setup.spec.display,
             len(study.get_trials(deepcopy=False)), workers)
    started = time.perf_counter()
    with _parent_run(study, setup, tracked, trust.tags, began) as parent:
        trust.log_datasets(parent, paths.splits())
        worker = Worker(study, storage, ClaimLock(setup.spec, setup.name),
                        setup.inputs(paths, parent.run_id), deadline(setup.tune))
        _run_workers(worker, workers, params, paths, progress)
        return _finish(study, setup, paths, parent, time.perf_counter() - started)


def _finish(study: optuna.Study, setup: Setup, paths: TunePaths, parent: tracking.Tracker,
            seconds: float) -> study_results.StudySummary:
    """Counts to MLflow; then, if a trial completed, the outputs and the plots."""
    summary = study_results.summarize(study, setup.tune.objective)
    metrics = study_results.metrics(summary, seconds)
    parent.log_metrics(metrics)
    study_results.require_complete(summary)
    study_results.write_best_params(paths.best, summary, setup.tune.epochs)
    study_results.write_metrics(paths.metrics, metrics)
    if parent.run_id is not None:
        parent.log_artifact(paths.best, plots.ARTIFACT_DIR)
        plots.log_plots(study, parent)
    return summary


def join_study(params: Path, paths: TunePaths, *, worker_index: int | None = None,
               threads: int | None = None, name: str | None = None) -> int:
    """One worker on an existing study; returns the trials it ran."""
    setup = load_setup(params, paths, name)
    paths.trust()
    torch.set_num_threads(threads or threads_for(1, setup.tune))
    storage = open_storage(setup.spec, setup.tune)
    index = os.getpid() if worker_index is None else worker_index
    study = open_study(storage, setup.name, setup.tune, worker_index=index, create=False)
    worker = Worker(study, storage, ClaimLock(setup.spec, setup.name),
                    setup.inputs(paths, study.user_attrs.get(ATTR_PARENT_RUN)),
                    deadline(setup.tune))
    ran = worker_loop(worker)
    log.info("worker %d on study %s: %d trials", index, setup.name, ran)
    return ran


def _run_workers(worker: Worker, workers: int, params: Path, paths: TunePaths,
                 progress: bool) -> None:
    cfg = worker.inputs.tune
    bar = Progress(worker.study, cfg.n_trials, progress)
    try:
        if workers == 1:
            torch.set_num_threads(threads_for(1, cfg))
            worker_loop(worker, on_trial=bar.refresh)
            return
        procs = spawn_workers(workers, threads_for(workers, cfg),
                              _worker_args(params, paths, worker.inputs.study_name))
        _check_exits(supervise(procs, bar), worker)
    finally:
        bar.close()


def _worker_args(params: Path, paths: TunePaths, name: str) -> list[str]:
    journal = paths.journal if paths.journal.is_absolute() else Path.cwd() / paths.journal
    return ["--params", str(params.resolve()), "--train", str(paths.train.resolve()),
            "--val", str(paths.val.resolve()), "--plan", str(paths.plan.resolve()),
            "--journal", str(journal), "--study", name,
            *(["--unvalidated"] if paths.validated is None
              else ["--validated", str(paths.validated.resolve())])]


def _check_exits(codes: list[int], worker: Worker) -> None:
    """A killed worker's trial is retried by the others; a worker that erred fails the stage."""
    for index, code in enumerate(codes, start=1):
        if code < 0:
            log.warning("worker %d was killed by signal %d; its trial is retried", index, -code)
    errors = [f"worker {i} exit {c}" for i, c in enumerate(codes, start=1) if c > 0]
    budget = budget_of(worker.study.get_trials(deepcopy=False))
    step = next_step(budget, worker.inputs.tune.n_trials, worker.expired)
    if not errors and step is Decision.DONE:
        return
    why = ", ".join(errors) or "every worker was killed"
    raise TuneError(f"{why} before the study finished ({budget.finished} trials done; see the "
                    "log above); the study is saved: re-run to resume")


@contextlib.contextmanager
def _parent_run(study: optuna.Study, setup: Setup, tracked: bool, trust: dict[str, str],
                began: float) -> Iterator[tracking.Tracker]:
    """The study's one MLflow parent run, reopened when the study resumes (a new one starts
    at ``began``, when the stage began: opening the study and hashing the splits count)."""
    if not tracked:
        yield tracking.NullTracker()
        return
    tags = {TAG_STUDY: setup.name, TAG_STORAGE: setup.spec.display,
            **{f"tune.{k}": str(getattr(setup.tune, k)) for k in BUDGET_KEYS
               if k != "storage"}, **trust}  # the URL may hold a password: TAG_STORAGE masks it
    with tracking.start_run(STAGE, tags=tags, started_at=began,
                            resume_run_id=study.user_attrs.get(ATTR_PARENT_RUN)) as run:
        study.set_user_attr(ATTR_PARENT_RUN, run.run_id)
        tune = {k: v for k, v in dataclasses.asdict(setup.tune).items()
                if k not in BUDGET_KEYS and k != "space"}  # budget keys may change on resume
        run.log_params({"tune": tune, "model": dataclasses.asdict(setup.model),
                        "train": dataclasses.asdict(setup.train)})
        run.log_dict(dataclasses.asdict(setup.tune.space), "tuning/space.json")
        yield run
