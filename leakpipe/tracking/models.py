"""Detector files as MLflow logged models: logging one, and fetching one back by URI."""

from __future__ import annotations

from pathlib import Path

from leakpipe.errors import DataError
from leakpipe.tracking.names import DETECTOR_SUFFIX
from leakpipe.tracking.runs import scratch_dir, tracking_uri


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
