"""MLflow runs: where the store is, starting a tagged run, finding and closing runs.

Tracking URI: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo root>/mlruns/mlflow.db``
with artifacts under ``<repo root>/mlruns/artifacts``; the repo root is ``DVC_ROOT`` when DVC
runs the stage. Every run is tagged with its stage, the DVC experiment and the git commit, so
each MLflow run maps back to a DVC experiment. A SQLite store that was moved or copied with its
project is repointed at its own folder before a run starts (``relocate.follow_move``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from leakpipe.db_urls import redacted, with_driver
from leakpipe.errors import LeakpipeError
from leakpipe.paths import repo_root
from leakpipe.tracking.names import (
    DEFAULT_EXPERIMENT,
    DVC_ENV_TAGS,
    ERROR_TAG_CHARS,
    EXPERIMENT_KIND,
    PARENT_RUN_TAG,
    SYSTEM_SAMPLES_BEFORE_LOGGING,
    TAG_ERROR,
    TAG_EXPERIMENT_KIND,
    TAG_GIT_COMMIT,
    TAG_STAGE,
)
from leakpipe.tracking.relocate import ARTIFACTS_DIR, follow_move, store_file
from leakpipe.tracking.trackers import MlflowTracker

log = logging.getLogger(__name__)
GIT_SHORT = 8
SEARCH_MAX = 1000          # runs per search (a grid cell has one run per stage)


def tracking_uri(root: Path | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` or the project's SQLite store under ``<root>/mlruns``."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return with_driver(env)
    root = root or repo_root()
    return f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"


def shown_tracking_uri() -> str:
    """``tracking_uri()`` as logs and messages may show it: without a password."""
    return redacted(tracking_uri())


def artifact_root(root: Path | None = None) -> Path:
    """Where a new experiment's artifacts go: beside the SQLite store that records the runs
    (``<store folder>/artifacts``: the project's ``mlruns/artifacts`` by default, a scratch
    store's own folder for a benchmark or a test, never the project's folder for another
    store's runs); for a server or database store, ``<root>/mlruns/artifacts``."""
    store = store_file(tracking_uri(root))
    if store is not None:
        return store.parent / ARTIFACTS_DIR
    return (root or repo_root()) / "mlruns" / ARTIFACTS_DIR


def run_tags(stage: str, root: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tags linking a run to its stage, DVC experiment and git commit."""
    tags = {TAG_STAGE: stage}
    for env, tag in DVC_ENV_TAGS.items():
        if os.environ.get(env):
            tags[tag] = os.environ[env]
    commit = git_commit(root)
    if commit:
        tags[TAG_GIT_COMMIT] = commit
    tags.update(extra or {})
    return tags


def run_label(stage: str) -> str:
    """The run name before its params are known: the stage, and the DVC experiment if any."""
    experiment = os.environ.get("DVC_EXP_NAME")
    return f"{stage} {experiment}" if experiment else stage


def run_description(stage: str, tags: Mapping[str, str]) -> str:
    """One line for the run's description: what ran, where in git / DVC."""
    where = [f"commit {tags[TAG_GIT_COMMIT][:GIT_SHORT]}"] if TAG_GIT_COMMIT in tags else []
    if "dvc.exp_name" in tags:
        where.append(f"DVC experiment {tags['dvc.exp_name']}")
    return f"leakpipe {stage}" + (f" ({', '.join(where)})" if where else "")


def git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _ensure_experiment(name: str, root: Path) -> str:
    """The experiment's id, created when the store has none of that name, and marked as a
    model-training experiment (``TAG_EXPERIMENT_KIND``) either way: a store made before the
    mark gets it when a stage next runs.

    Stages may start at once (queued DVC experiments, tuning workers): when another process
    creates the experiment between the look-up and the create, its experiment is used.
    """
    import mlflow
    from mlflow.exceptions import MlflowException

    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        location = artifact_root(root)
        location.mkdir(parents=True, exist_ok=True)
        try:
            return mlflow.create_experiment(name, artifact_location=location.as_uri(),
                                            tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND})
        except MlflowException:
            experiment = mlflow.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.tags.get(TAG_EXPERIMENT_KIND) != EXPERIMENT_KIND:
        mlflow.MlflowClient().set_experiment_tag(experiment.experiment_id, TAG_EXPERIMENT_KIND,
                                                 EXPERIMENT_KIND)
    return experiment.experiment_id


def error_line(exc: BaseException) -> str:
    """The one line a failed run is tagged with: a leakpipe error's own message (what the CLI
    prints), any other exception's type and the first line of its message; cut to
    ``ERROR_TAG_CHARS``."""
    lines = str(exc).strip().splitlines()
    text = lines[0].strip() if lines else ""
    if not isinstance(exc, LeakpipeError) or not text:
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= ERROR_TAG_CHARS else text[:ERROR_TAG_CHARS - 3] + "..."


@contextlib.contextmanager
def start_run(stage: str, *, tags: Mapping[str, str] | None = None,
              system_metrics: bool = False, nested: bool = False,
              system_metrics_interval_s: float | None = None,
              parent_run_id: str | None = None,
              resume_run_id: str | None = None,
              started_at: float | None = None,
              ended_at: float | None = None) -> Iterator[MlflowTracker]:
    """One MLflow run for one stage execution; FAILED on error (tagged ``leakpipe.error`` with
    its one line, which also ends the run's description, so the run says why), KILLED on
    interrupt (its description says what stopped it); else what the tracker's ``end_as``
    chose (FINISHED unless told: a pruned tuning trial ends KILLED).

    ``started_at`` / ``ended_at`` (seconds since the epoch, ``time.time()``): when the work the
    run records began / ended, for a run opened after its work (a stage logs its figures once
    they exist; a fold's child run is logged after every fold ran): the run's duration in the
    UI is then the work's, not the logging's. None: now.

    ``parent_run_id`` makes it a child run (nested when the parent is active in this process);
    ``resume_run_id`` reopens that run when the store holds it (a resumed tuning study);
    ``system_metrics`` turns on MLflow's own system metrics, sampled every
    ``system_metrics_interval_s`` seconds (MLflow's default when None)."""
    import mlflow

    if system_metrics and system_metrics_interval_s is not None:
        mlflow.set_system_metrics_sampling_interval(system_metrics_interval_s)
        mlflow.set_system_metrics_samples_before_logging(SYSTEM_SAMPLES_BEFORE_LOGGING)

    root = repo_root()
    uri = _open_store(root)
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", DEFAULT_EXPERIMENT)
    experiment_id = _ensure_experiment(experiment, root)
    nested = nested or (parent_run_id is not None and mlflow.active_run() is not None)
    all_tags = run_tags(stage, root, tags)
    label = run_label(stage)
    run_id = _existing_run(resume_run_id)
    if run_id is None and started_at is not None:
        run_id = _created_run(experiment_id, label, all_tags, parent_run_id, started_at)
    run = mlflow.start_run(run_id=run_id, experiment_id=experiment_id,
                           run_name=label, nested=nested, parent_run_id=parent_run_id,
                           tags=all_tags, log_system_metrics=system_metrics)
    log.info("mlflow run %s (%s) in %s", run.info.run_id, stage, redacted(uri))
    tracker = MlflowTracker(run.info.run_id, label, run_description(stage, all_tags))
    status = "FAILED"  # stays so for any exception that leaves the block
    try:
        yield tracker
        status = tracker.end_status
    except KeyboardInterrupt as exc:
        status = "KILLED"
        _say_why(tracker, f"KILLED: {error_line(exc)}")
        raise
    except BaseException as exc:
        line = error_line(exc)
        _say_why(tracker, f"FAILED: {line}", {TAG_ERROR: line})
        raise
    finally:
        mlflow.end_run(status=status)
        if ended_at is not None:
            mlflow.MlflowClient().set_terminated(run.info.run_id, status,
                                                 end_time=_ms(ended_at))


def _open_store(root: Path) -> str:
    """The tracking URI of ``root``, set for this process; a SQLite store's folder made, and
    the store repointed when the project was moved or copied (artifacts beside the store)."""
    import mlflow

    uri = tracking_uri(root)
    store = store_file(uri)
    if store is not None:
        store.parent.mkdir(parents=True, exist_ok=True)
        follow_move(store)
    mlflow.set_tracking_uri(uri)
    return uri


def _created_run(experiment_id: str, label: str, tags: Mapping[str, str],
                 parent_run_id: str | None, started_at: float) -> str:
    """A new run that began at ``started_at`` (a run opened after its work): its id."""
    import mlflow

    created_tags = dict(tags)
    if parent_run_id is not None:
        created_tags[PARENT_RUN_TAG] = parent_run_id
    return mlflow.MlflowClient().create_run(experiment_id, start_time=_ms(started_at),
                                            tags=created_tags, run_name=label).info.run_id


def _ms(seconds: float) -> int:
    """``time.time()`` seconds -> MLflow's integer milliseconds."""
    return int(round(seconds * 1000.0))


def _say_why(tracker: MlflowTracker, note: str, tags: Mapping[str, str] | None = None) -> None:
    """Why the run ended early, as the last paragraph of its description (and ``tags``); a
    store that refuses them (it may be why the run failed) leaves the original error to
    propagate, with one WARNING."""
    try:
        if tags:
            tracker.set_tags(tags)
        tracker.add_note(note)
    except Exception as exc:  # noqa: BLE001 - the run's own error matters more than this one
        log.warning("could not record on the run why it ended (%s)", exc)


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A temporary folder for artifacts that are logged and then dropped."""
    with tempfile.TemporaryDirectory(prefix="leakpipe-") as tmp:
        yield Path(tmp)


# -- runs looked up across stages -----------------------------------------------------------------


def _client() -> Any:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    return mlflow.MlflowClient()


def find_run_id(stage: str, tags: Mapping[str, str]) -> str | None:
    """The newest run of ``stage`` carrying every tag in ``tags`` (None when there is none)."""
    from mlflow.exceptions import MlflowException

    clauses = [f"tags.`{TAG_STAGE}` = '{stage}'"]
    clauses += [f"tags.`{key}` = '{value}'" for key, value in tags.items()]
    try:
        client = _client()
        runs = client.search_runs(
            experiment_ids=[e.experiment_id for e in client.search_experiments()],
            filter_string=" and ".join(clauses), order_by=["attributes.start_time DESC"],
            max_results=1)
    except MlflowException as exc:
        log.warning("could not search MLflow runs (%s)", exc)
        return None
    return runs[0].info.run_id if runs else None


def run_tag(run_id: str, key: str) -> str | None:
    """Tag ``key`` of run ``run_id``; None when the run or the tag is not in the store."""
    from mlflow.exceptions import MlflowException

    try:
        return _client().get_run(run_id).data.tags.get(key)
    except MlflowException:
        return None


def nest_runs(parent_run_id: str, tag: str, values: Sequence[str]) -> int:
    """Make every run whose ``tag`` is one of ``values`` a child of ``parent_run_id`` (MLflow's
    ``mlflow.parentRunId`` tag), so the UI lists them under it; returns how many were nested.
    The segmentation-grid study nests each cell's runs (tag ``dvc.exp_name``) under its run."""
    client = _client()
    experiments = [e.experiment_id for e in client.search_experiments()]
    nested = 0
    for value in values:
        quoted = value.replace("'", "\\'")
        for run in client.search_runs(experiments, f"tags.`{tag}` = '{quoted}'",
                                      max_results=SEARCH_MAX):
            if run.info.run_id != parent_run_id:
                client.set_tag(run.info.run_id, PARENT_RUN_TAG, parent_run_id)
                nested += 1
    return nested


def _existing_run(run_id: str | None) -> str | None:
    """``run_id`` when the current store holds that run, else None (start a new one)."""
    if run_id is None:
        return None
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        return MlflowClient().get_run(run_id).info.run_id
    except MlflowException:
        log.info("mlflow run %s is not in %s; starting a new run", run_id,
                 shown_tracking_uri())
        return None


def end_run_by_id(run_id: str, status: str = "KILLED") -> None:
    """Close a run that another process left open (a tuning worker that died)."""
    from mlflow import MlflowClient

    MlflowClient(tracking_uri()).set_terminated(run_id, status=status)


def end_run_if_running(run_id: str, status: str = "KILLED") -> bool:
    """Close ``run_id`` when it is still RUNNING (its process was killed); True if it was."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri())
    try:
        running = client.get_run(run_id).info.status == "RUNNING"
    except MlflowException:
        return False
    if running:
        client.set_terminated(run_id, status=status)
    return running
