"""The trained detector file (`models/model.pt`): weights plus everything needed to use them.

One versioned dict, written atomically and read with ``torch.load(weights_only=True)``: the
unwrapped model state, the model config, the task's class names and the data's, the feature
config the model was trained on (so `leakpipe predict` always computes matching features), the
voting rule and the decision threshold chosen on the validation split (the original saved 0.5
instead of the threshold it had chosen).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from leakpipe.config import FeatureConfig, ModelConfig, from_mapping
from leakpipe.data.schema import leak_index
from leakpipe.errors import DataError
from leakpipe.evaluate.voting import VotingConfig
from leakpipe.inference import inference_form
from leakpipe.model import create_model
from leakpipe.train.checkpoint import model_state, save_atomic

DETECTOR_FORMAT = "leakpipe.detector"
DETECTOR_VERSION = 1


@dataclass(frozen=True)
class Detector:
    """A loaded detector: the model in eval mode and the rules around it."""

    model: nn.Module
    model_cfg: ModelConfig
    class_names: tuple[str, ...]        # the task's classes (NOLEAK / LEAK in binary mode)
    data_class_names: tuple[str, ...]   # the classes of the HDF5 data it was trained on
    binary: bool
    features: FeatureConfig
    voting: VotingConfig
    threshold: float
    metrics: dict[str, float]

    @property
    def leak_index(self) -> int:
        return leak_index(self.class_names)

    def inference_model(self) -> nn.Module:
        """The model's exact, faster inference form for this detector's segments."""
        return inference_form(self.model, self.features.segment_shape[-1])


def save_detector(path: Path, *, model: nn.Module, model_cfg: ModelConfig,
                  class_names: tuple[str, ...], data_class_names: tuple[str, ...], binary: bool,
                  features: FeatureConfig, voting: VotingConfig, threshold: float,
                  metrics: dict[str, float]) -> None:
    """Write the detector file atomically (temporary file + rename)."""
    save_atomic({
        "format": DETECTOR_FORMAT,
        "version": DETECTOR_VERSION,
        "model": model_state(model),
        "model_config": _plain(dataclasses.asdict(model_cfg)),
        "class_names": list(class_names),
        "data_class_names": list(data_class_names),
        "binary": bool(binary),
        "features": features.to_dict(),
        "voting": dataclasses.asdict(voting),
        "threshold": float(threshold),
        "metrics": {k: float(v) for k, v in metrics.items()},
    }, Path(path))


def load_detector(path: Path, map_location: str | torch.device = "cpu") -> Detector:
    """Read a detector file; a wrong or unknown format is a ``DataError`` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such model file")
    try:
        raw = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise DataError(f"{path}: not a readable leakpipe model ({type(exc).__name__})") from None
    if not isinstance(raw, dict) or raw.get("format") != DETECTOR_FORMAT:
        raise DataError(f"{path}: not a leakpipe detector file (train writes models/model.pt)")
    if raw.get("version") != DETECTOR_VERSION:
        raise DataError(f"{path}: detector version {raw.get('version')} is not "
                        f"{DETECTOR_VERSION}; retrain or use a matching leakpipe")
    model_cfg = from_mapping(ModelConfig, raw["model_config"], "model_config", str(path))
    class_names = tuple(raw["class_names"])
    model = create_model(model_cfg, len(class_names))
    model.load_state_dict(raw["model"])
    model.eval()
    return Detector(
        model=model, model_cfg=model_cfg, class_names=class_names,
        data_class_names=tuple(raw["data_class_names"]), binary=bool(raw["binary"]),
        features=from_mapping(FeatureConfig, raw["features"], "features", str(path)),
        voting=VotingConfig(**raw["voting"]), threshold=float(raw["threshold"]),
        metrics=dict(raw["metrics"]))


def _plain(value: Any) -> Any:
    """Tuples -> lists so the dict round-trips through weights_only loading and from_mapping."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
