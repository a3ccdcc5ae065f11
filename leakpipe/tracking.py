"""The MLflow adapter: the one module in leakpipe that knows MLflow.

Tracking URI: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo root>/mlruns/mlflow.db``
with artifacts under ``<repo root>/mlruns/artifacts``; the repo root is ``DVC_ROOT`` when DVC
runs the stage. Every run is tagged with its stage, the DVC experiment and the git commit, so
each MLflow run maps back to a DVC experiment.

A tracker also logs the trained network (``log_model``: ``mlflow.pytorch`` with a signature and
an input example) and, when asked, MLflow's own system metrics (``system/*``: CPU, memory, GPU
via psutil / nvidia-ml-py), sampled every ``system_metrics_interval_s``.
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

from leakpipe.errors import DataError
from leakpipe.paths import repo_root

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "leakpipe"
TAG_STAGE = "leakpipe.stage"
TAG_DATA = "leakpipe.data_checksum"
DVC_ENV_TAGS = {"DVC_EXP_NAME": "dvc.exp_name", "DVC_EXP_BASELINE_REV": "dvc.baseline_rev"}
TAG_GIT_COMMIT = "mlflow.source.git.commit"
MODEL_NAME = "model"                 # artifact name of a network logged with log_model
SYSTEM_SAMPLES_BEFORE_LOGGING = 1    # MLflow system metrics: log every sample
TAG_MODEL_SHA256 = "leakpipe.model_sha256"   # sha256 of models/model.pt (train and evaluate)
TAG_TRAIN_RUN = "leakpipe.train_run_id"      # on an evaluate run: the train run of its model
TAG_DETECTOR_URI = "leakpipe.detector_uri"   # models:/ URI of a logged detector file
DETECTOR_SUFFIX = ".pt"


class Tracker(Protocol):
    """What stages may do with a run; ``NullTracker`` does nothing, ``MlflowTracker`` logs."""

    run_id: str | None

    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...
    def log_artifact(self, path: Path, subdir: str | None = None) -> None: ...
    def log_dict(self, data: Mapping[str, Any], name: str) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...
    def log_figure(self, figure: Any, name: str) -> None: ...
    def log_table(self, columns: Mapping[str, list[Any]], name: str) -> None: ...
    def log_model(self, model: Any, input_example: Any,
                  code_paths: list[Path] | None = None) -> None: ...


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

    def log_figure(self, figure: Any, name: str) -> None:
        pass

    def log_table(self, columns: Mapping[str, list[Any]], name: str) -> None:
        pass

    def log_model(self, model: Any, input_example: Any,
                  code_paths: list[Path] | None = None) -> None:
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

    def log_figure(self, figure: Any, name: str) -> None:
        """A matplotlib figure as an image artifact (``name`` ends in .png / .svg)."""
        import mlflow

        mlflow.log_figure(figure, name)

    def log_table(self, columns: Mapping[str, list[Any]], name: str) -> None:
        """Columns of equal length as an MLflow table (JSON artifact, shown in the UI)."""
        import mlflow

        mlflow.log_table(data=dict(columns), artifact_file=name)

    def log_model(self, model: Any, input_example: Any,
                  code_paths: list[Path] | None = None) -> None:
        """A torch ``model`` (eval mode, CPU) as the run's MLflow PyTorch model ``model``.

        ``input_example`` is a NumPy batch of >= 2 inputs; the signature is inferred from it and
        the model's output on it. Requirements are pinned here rather than inferred (inference
        re-loads the model in a subprocess); ``code_paths`` ship the code the model needs.
        """
        import mlflow.pytorch
        import torch
        from mlflow.models import infer_signature

        with torch.inference_mode():
            output = model(torch.as_tensor(input_example)).numpy()
        mlflow.pytorch.log_model(
            model, name=MODEL_NAME, input_example=input_example,
            signature=infer_signature(input_example, output),
            pip_requirements=_model_requirements(),
            code_paths=[str(p) for p in code_paths or []])


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


def _model_requirements() -> list[str]:
    """Pinned requirements of a logged PyTorch model: torch and numpy as installed here."""
    import numpy
    import torch

    return [f"torch=={torch.__version__.split('+')[0]}", f"numpy=={numpy.__version__}"]


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
              system_metrics: bool = False, nested: bool = False,
              system_metrics_interval_s: float | None = None,
              parent_run_id: str | None = None,
              resume_run_id: str | None = None) -> Iterator[MlflowTracker]:
    """One MLflow run for one stage execution; FAILED on error, KILLED on interrupt.

    ``parent_run_id`` makes it a child run (nested when the parent is active in this process);
    ``resume_run_id`` reopens that run when the store holds it (a resumed tuning study).

    ``system_metrics`` turns on MLflow's own system metrics, sampled every
    ``system_metrics_interval_s`` seconds (MLflow's default when None).
    """
    import mlflow

    if system_metrics and system_metrics_interval_s is not None:
        mlflow.set_system_metrics_sampling_interval(system_metrics_interval_s)
        mlflow.set_system_metrics_samples_before_logging(SYSTEM_SAMPLES_BEFORE_LOGGING)

    root = repo_root()
    uri = tracking_uri(root)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", DEFAULT_EXPERIMENT)
    experiment_id = _ensure_experiment(experiment, root)
    nested = nested or (parent_run_id is not None and mlflow.active_run() is not None)
    run = mlflow.start_run(run_id=_existing_run(resume_run_id), experiment_id=experiment_id,
                           run_name=stage, nested=nested, parent_run_id=parent_run_id,
                           tags=run_tags(stage, root, tags), log_system_metrics=system_metrics)
    log.info("mlflow run %s (%s) in %s", run.info.run_id, stage, uri)
    status = "FAILED"  # stays so for any exception that leaves the block
    try:
        yield MlflowTracker(run.info.run_id)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        mlflow.end_run(status=status)


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A temporary folder for artifacts that are logged and then dropped."""
    with tempfile.TemporaryDirectory(prefix="leakpipe-") as tmp:
        yield Path(tmp)


# -- runs and models looked up across stages ------------------------------------------------------


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


def log_detector(path: Path, name: str = "detector") -> str:
    """Log a detector file as an MLflow logged model of the active run; its ``models:/`` URI.

    The model holds the detector file itself (weights, features, voting rule, threshold), so
    ``download_model(uri)`` gives back exactly what `leakpipe predict` needs.
    """
    import mlflow

    run = mlflow.active_run()
    model = mlflow.initialize_logged_model(
        name=name, source_run_id=run.info.run_id if run else None,
        experiment_id=run.info.experiment_id if run else None)
    with scratch_dir() as folder:
        (folder / path.name).write_bytes(Path(path).read_bytes())
        mlflow.MlflowClient().log_model_artifacts(model.model_id, str(folder))
    mlflow.finalize_logged_model(model.model_id, "READY")
    return f"models:/{model.model_id}"


def is_model_uri(text: str) -> bool:
    return "://" in text or text.startswith(("models:/", "runs:/"))


def download_model(uri: str) -> Path:
    """A local detector file for an MLflow URI (``models:/name/1``, ``models:/m-...``,
    ``runs:/<id>/path``): the artifact itself, or the one detector file inside a model folder.
    """
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(tracking_uri())
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
    except MlflowException as exc:
        raise DataError(f"{uri}: cannot be loaded from MLflow ({exc.message})") from None
    if local.is_file():
        return local
    found = sorted(p for p in local.rglob(f"*{DETECTOR_SUFFIX}") if p.is_file())
    if len(found) != 1:
        raise DataError(f"{uri}: expected one leakpipe detector file (*{DETECTOR_SUFFIX}) in "
                        f"the model, found {len(found)}; log it with tracking.log_detector")
    return found[0]


def _existing_run(run_id: str | None) -> str | None:
    """``run_id`` when the current store holds that run, else None (start a new one)."""
    if run_id is None:
        return None
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        return MlflowClient().get_run(run_id).info.run_id
    except MlflowException:
        log.info("mlflow run %s is not in %s; starting a new run", run_id, tracking_uri())
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
