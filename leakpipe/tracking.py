"""The MLflow adapter: the one module in leakpipe that knows MLflow.

Tracking URI: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo root>/mlruns/mlflow.db``
with artifacts under ``<repo root>/mlruns/artifacts``; the repo root is ``DVC_ROOT`` when DVC
runs the stage. Every run is tagged with its stage, the DVC experiment and the git commit, so
each MLflow run maps back to a DVC experiment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from leakpipe.paths import repo_root

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "leakpipe"
TAG_STAGE = "leakpipe.stage"
TAG_DATA = "leakpipe.data_checksum"
DVC_ENV_TAGS = {"DVC_EXP_NAME": "dvc.exp_name", "DVC_EXP_BASELINE_REV": "dvc.baseline_rev"}
TAG_GIT_COMMIT = "mlflow.source.git.commit"


class Tracker(Protocol):
    """What stages may do with a run; ``NullTracker`` does nothing, ``MlflowTracker`` logs."""

    run_id: str | None

    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...
    def log_artifact(self, path: Path, subdir: str | None = None) -> None: ...
    def log_dict(self, data: Mapping[str, Any], name: str) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...


class NullTracker:
    """A tracker that records nothing (tests, dry runs)."""

    run_id: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def log_artifact(self, path: Path, subdir: str | None = None) -> None:
        pass

    def log_dict(self, data: Mapping[str, Any], name: str) -> None:
        pass

    def set_tags(self, tags: Mapping[str, str]) -> None:
        pass


class MlflowTracker:
    """Logs into the active MLflow run."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        import mlflow

        mlflow.log_params({k: _param_value(v) for k, v in flatten(params).items()})

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        import mlflow

        mlflow.log_metrics({k: float(v) for k, v in flatten(metrics).items()}, step=step)

    def log_artifact(self, path: Path, subdir: str | None = None) -> None:
        import mlflow

        mlflow.log_artifact(str(path), artifact_path=subdir)

    def log_dict(self, data: Mapping[str, Any], name: str) -> None:
        import mlflow

        mlflow.log_dict(dict(data), name)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        import mlflow

        mlflow.set_tags(dict(tags))


def tracking_uri(root: Path | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` or the project's SQLite store under ``<root>/mlruns``."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    root = root or repo_root()
    return f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"


def artifact_root(root: Path | None = None) -> Path:
    return (root or repo_root()) / "mlruns" / "artifacts"


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


def git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def flatten(data: Mapping[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; keys already holding '/' are kept as they are."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flatten(value, name, sep))
        else:
            out[name] = value
    return out


def _param_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _ensure_experiment(name: str, root: Path) -> str:
    import mlflow

    experiment = mlflow.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    location = artifact_root(root)
    location.mkdir(parents=True, exist_ok=True)
    return mlflow.create_experiment(name, artifact_location=location.as_uri())


@contextlib.contextmanager
def start_run(stage: str, *, tags: Mapping[str, str] | None = None,
              system_metrics: bool = False, nested: bool = False) -> Iterator[MlflowTracker]:
    """One MLflow run for one stage execution; FAILED on error, KILLED on interrupt."""
    import mlflow

    root = repo_root()
    uri = tracking_uri(root)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", DEFAULT_EXPERIMENT)
    experiment_id = _ensure_experiment(experiment, root)
    run = mlflow.start_run(experiment_id=experiment_id, run_name=stage, nested=nested,
                           tags=run_tags(stage, root, tags), log_system_metrics=system_metrics)
    log.info("mlflow run %s (%s) in %s", run.info.run_id, stage, uri)
    try:
        yield MlflowTracker(run.info.run_id)
    except KeyboardInterrupt:
        mlflow.end_run(status="KILLED")
        raise
    except BaseException:
        mlflow.end_run(status="FAILED")
        raise
    mlflow.end_run(status="FINISHED")


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A temporary folder for artifacts that are logged and then dropped."""
    with tempfile.TemporaryDirectory(prefix="leakpipe-") as tmp:
        yield Path(tmp)
