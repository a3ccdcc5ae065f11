"""The mutable state of one ``fit`` call, shared by the epoch loop and resume.

``fit`` builds a ``RunState`` once and updates it epoch by epoch; ``leakpipe.train.resume``
fills it from a checkpoint. Everything a checkpoint stores comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from leakpipe.config import DecisionConfig, TrainConfig
from leakpipe.runtime import Runtime
from leakpipe.train.early_stopping import BestTracker, EarlyStopping
from leakpipe.train.losses import LossFn
from leakpipe.train.optim import Optimization


@dataclass
class RunState:
    """Everything ``fit`` builds once and then mutates epoch by epoch."""

    cfg: TrainConfig
    runtime: Runtime
    decision: DecisionConfig
    model: nn.Module
    optim: Optimization
    loss_fn: LossFn
    stopper: EarlyStopping
    best: BestTracker
    config: dict[str, dict[str, Any]]   # params sections (and the data identity) of this run
    class_names: tuple[str, ...]
    features: dict[str, Any]
    history: list[dict[str, float]] = field(default_factory=list)
    diagnoses: list[str] = field(default_factory=list)
    best_state: dict[str, torch.Tensor] | None = None
    best_confusion: dict[str, Any] | None = None
    next_epoch: int = 0
    stop_reason: str = ""
    pending: dict[str, Any] | None = None   # a mid-epoch checkpoint's ``partial`` entry
