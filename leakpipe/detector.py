"""The trained detector file (`models/model.pt`): weights plus everything needed to use them.

One versioned dict, written atomically and read with ``torch.load(weights_only=True)``: the
unwrapped model state, the model config, the task's class names and the data's, the feature
config the model was trained on (so `leakpipe predict` always computes matching features), the
per-clip input normalisation it was trained with (``train.input_norm``; version 1 files predate
it and mean ``none``), the voting rule and the decision threshold chosen on the validation split
(the original saved 0.5 instead of the threshold it had chosen).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from leakpipe.config import INPUT_NORMS, FeatureConfig, ModelConfig, from_mapping
from leakpipe.data.input_norm import NORM_NONE, check_norm
from leakpipe.data.schema import leak_index
from leakpipe.errors import DataError
from leakpipe.evaluate.voting import VotingConfig
from leakpipe.inference import inference_form
from leakpipe.model import create_model
from leakpipe.train.checkpoint import model_state, save_atomic

DETECTOR_FORMAT = "leakpipe.detector"
DETECTOR_VERSION = 2
READABLE_VERSIONS = (1, 2)   # 1: no input normalisation stored (it was always none)


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
    input_norm: str = NORM_NONE         # per-clip normalisation the model expects (input_norm)

    @property
    def leak_index(self) -> int:
        return leak_index(self.class_names)

    def inference_model(self) -> nn.Module:
        """The model's exact, faster inference form for this detector's segments."""
        return inference_form(self.model, self.features.segment_shape[-1])


def save_detector(path: Path, *, model: nn.Module, model_cfg: ModelConfig,
                  class_names: tuple[str, ...], data_class_names: tuple[str, ...], binary: bool,
                  features: FeatureConfig, voting: VotingConfig, threshold: float,
                  metrics: dict[str, float], input_norm: str = NORM_NONE) -> None:
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
        "input_norm": check_norm(input_norm),
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
    if raw.get("version") not in READABLE_VERSIONS:
        raise DataError(f"{path}: detector version {raw.get('version')} is not one of "
                        f"{list(READABLE_VERSIONS)}; retrain or use a matching leakpipe")
    input_norm = raw.get("input_norm", NORM_NONE)
    if input_norm not in INPUT_NORMS:
        raise DataError(f"{path}: input_norm {input_norm!r} is not one of {list(INPUT_NORMS)}")
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
        metrics=dict(raw["metrics"]), input_norm=input_norm)


def _plain(value: Any) -> Any:
    """Tuples -> lists so the dict round-trips through weights_only loading and from_mapping."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
