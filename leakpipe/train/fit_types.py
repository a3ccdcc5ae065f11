"""What ``fit()`` takes and gives: the batch-source and probe protocols, the options and results.

Kept apart from the loop so that callers (the train stage, tuning trials, the sim-to-real
check) and tests read the contract without the orchestration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from leakpipe.train.distributed import Distributed
from leakpipe.train.loop import Batch


class TrainSource(Protocol):
    """Training batches: ``len()`` micro-batches per epoch, the same batches for the same epoch.

    Sources with ``state_dict()`` / ``load_state_dict()`` (``ResidentSource``, ``StreamSource``)
    can also be stopped and resumed in the middle of an epoch.
    """

    def __len__(self) -> int: ...

    def epoch(self, epoch: int) -> Iterable[Batch]: ...


class EpochProbe(Protocol):
    """Diagnostics around an epoch (``leakpipe.monitor.TrainMonitor``), never inside the loop."""

    def batches(self, epoch: int, batches: Iterable[Batch]) -> Iterable[Batch]: ...

    def epoch_metrics(self, epoch: int, source: object) -> dict[str, float]: ...


@dataclass(frozen=True)
class FitOptions:
    """Optional parts of a fit; the defaults are the plain single-process tuning path."""

    should_stop: Callable[[], bool] | None = None   # polled after every optimizer step
    probe: EpochProbe | None = None
    dist: Distributed = field(default_factory=Distributed.single)
    progress: bool = False                           # a tqdm bar per epoch (rank 0)
    data_id: Mapping[str, str] | None = None         # resume refuses other data


@dataclass(frozen=True)
class EpochSummary:
    """What rank 0's validation tells every rank about an epoch."""

    metrics: dict[str, float]
    diagnosis: str                   # "" when healthy
    confusion: dict[str, Any]        # see ``_confusion``


@dataclass(frozen=True)
class FitResult:
    model: nn.Module                 # unwrapped, best epoch's weights, eval mode
    best_epoch: int
    best_metrics: dict[str, float]
    threshold: float                 # file threshold of the best epoch (val/clip_threshold)
    monitor: str
    stop_reason: str
    epochs_run: int                  # epochs trained by this call (0 when nothing was left)
    history: list[dict[str, float]]  # one metrics dict per epoch
    diagnoses: list[str]             # the collapse diagnosis per epoch ("" when healthy)
    best_checkpoint: Path | None
    resumed_from: Path | None
    best_confusion: dict[str, Any] | None = None   # val confusion matrices of the best epoch
