"""What a stage logs through: the ``Tracker`` protocol, ``NullTracker`` and ``MlflowTracker``.

A tracker also logs the trained network (``log_model``: ``mlflow.pytorch`` with a signature and
an input example), adds paragraphs to the run's description (``add_note``: what a person reads
first on the run's page, e.g. the best epoch or why the run failed) and may end its run as
something other than FINISHED without raising (``end_as``: a pruned tuning trial is KILLED).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from leakpipe.tracking.names import (
    DATASET_DIGEST_CHARS,
    DESCRIPTION_TAG,
    MODEL_NAME,
    PARAMS_DIGEST_CHARS,
    RUN_NAME_TAG,
)


def params_digest(params: Mapping[str, str]) -> str:
    """A short digest of flattened params: equal params, equal digest, in any order."""
    text = "\n".join(f"{k}={params[k]}" for k in sorted(params))
    return hashlib.sha256(text.encode()).hexdigest()[:PARAMS_DIGEST_CHARS]


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
    def log_dataset(self, path: Path, name: str, digest: str, context: str) -> None: ...
    def add_note(self, text: str) -> None: ...
    def end_as(self, status: str) -> None: ...


END_STATES = ("FINISHED", "KILLED", "FAILED")   # what a run may end as (MLflow's RunStatus)


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

    def log_dataset(self, path: Path, name: str, digest: str, context: str) -> None:
        pass

    def add_note(self, text: str) -> None:
        pass

    def end_as(self, status: str) -> None:
        _check_status(status)


class MlflowTracker:
    """Logs into its own MLflow run, by run id: a parent's figures stay the parent's while
    one of its child runs is the active one.

    A run starts named after its stage (and DVC experiment, ``label``); once params are logged
    its name gains a digest of them and its description says what it is, so twenty train runs
    in the UI differ at a glance (a name set explicitly through ``set_tags`` is kept). Notes
    (``add_note``) follow that first line as paragraphs of their own. ``end_status`` is what
    ``start_run`` closes the run as when its block ends without an exception.
    """

    def __init__(self, run_id: str, label: str = "", description: str = "") -> None:
        self.run_id = run_id
        self.label = label
        self.description = description
        self.end_status = "FINISHED"
        self._params: dict[str, str] = {}
        self._notes: list[str] = []
        self._named = False

    def log_params(self, params: Mapping[str, Any]) -> None:
        import mlflow

        flat = {k: _param_value(v) for k, v in flatten(params).items()}
        mlflow.log_params(flat, run_id=self.run_id)
        self._params.update({k: str(v) for k, v in flat.items()})
        if not self.label:
            return
        tags = {DESCRIPTION_TAG: self._description()}
        if not self._named:
            tags[RUN_NAME_TAG] = f"{self.label} p{params_digest(self._params)}"
        self._tag(tags)

    def add_note(self, text: str) -> None:
        """A paragraph (markdown) after the description's first line."""

        self._notes.append(text.strip())
        self._tag({DESCRIPTION_TAG: self._description()})

    def end_as(self, status: str) -> None:
        """Close the run as ``status`` (FINISHED, KILLED or FAILED) when its block ends
        normally; an exception still decides for itself (FAILED, or KILLED on interrupt)."""
        self.end_status = _check_status(status)

    def _description(self) -> str:
        head = self.description
        if self._params:
            head += (f"; params digest {params_digest(self._params)} "
                     f"({len(self._params)} params)")
        return "\n\n".join(part for part in (head, *self._notes) if part)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        import mlflow

        mlflow.log_metrics({k: float(v) for k, v in flatten(metrics).items()}, step=step,
                           run_id=self.run_id)

    def log_artifact(self, path: Path, subdir: str | None = None) -> None:
        import mlflow

        mlflow.log_artifact(str(path), artifact_path=subdir, run_id=self.run_id)

    def log_dict(self, data: Mapping[str, Any], name: str) -> None:
        import mlflow

        mlflow.log_dict(dict(data), name, run_id=self.run_id)

    def set_tags(self, tags: Mapping[str, str]) -> None:

        self._named = self._named or RUN_NAME_TAG in tags
        self._tag(tags)

    def _tag(self, tags: Mapping[str, str]) -> None:
        """Tags on this tracker's own run, also while a child run is the active one."""
        from mlflow import MlflowClient
        from mlflow.entities import RunTag

        MlflowClient().log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_dataset(self, path: Path, name: str, digest: str, context: str) -> None:
        """A split file as the run's MLflow dataset input (UI: "Datasets used"): its name, its
        content hash and where it lies; nothing is uploaded."""
        import mlflow
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        with warnings.catch_warnings():   # MLflow registers its local-file source class twice
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(Path(path).resolve().as_uri())
        mlflow.log_input(MetaDataset(source, name=name, digest=digest[:DATASET_DIGEST_CHARS]),
                         context=context)

    def log_figure(self, figure: Any, name: str) -> None:
        """A matplotlib figure as an image artifact (``name`` ends in .png / .svg)."""
        import mlflow

        mlflow.log_figure(figure, name)

    def log_table(self, columns: Mapping[str, list[Any]], name: str) -> None:
        """Columns of equal length as an MLflow table (JSON artifact, shown in the UI)."""
        import mlflow

        mlflow.log_table(data=dict(columns), artifact_file=name, run_id=self.run_id)

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


def _check_status(status: str) -> str:
    if status not in END_STATES:
        raise ValueError(f"a run ends as one of {END_STATES}, not {status!r}")
    return status


def _param_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
