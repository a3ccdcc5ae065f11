"""One training epoch: a small result dataclass, no I/O.

Batches are ``(x (B, 1, n_mels, T), y (B,) int64 task labels, file index (B,))``. Mixed
precision is the runtime's one ``torch.autocast`` plus a ``GradScaler(enabled=...)``: no
``if amp:`` branches. Metrics accumulate on the device and reach the host once at the end of
the epoch (and every ``log_every`` optimizer steps when asked). Validation is
``leakpipe.train.validation`` over the one scoring path.

A training epoch can stop between optimizer steps (``should_stop``, polled after each step: a
signal handler's flag) and hand back its ``EpochProgress``; passing that progress back as
``resume`` continues the epoch with the same accumulators, so the finished epoch's metrics equal
an uninterrupted one's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from leakpipe.runtime import Runtime
from leakpipe.train.losses import LossFn, NonFiniteWatch
from leakpipe.train.optim import Optimization

log = logging.getLogger(__name__)

Batch = tuple[Tensor, Tensor, Tensor]


class _Sums:
    """Named device-side accumulators, read back only through ``_sync``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.values: dict[str, Tensor] = {}

    @classmethod
    def restored(cls, device: torch.device, values: dict[str, float]) -> _Sums:
        """Accumulators continuing from host values (float64 round-trips exactly)."""
        sums = cls(device)
        sums.values = {k: torch.tensor(v, dtype=torch.float64, device=device)
                       for k, v in values.items()}
        return sums

    def add(self, **values: Tensor) -> None:
        for name, value in values.items():
            value = value.detach().double()
            self.values[name] = self.values[name] + value if name in self.values else value

    def maximum(self, name: str, value: Tensor) -> None:
        value = value.detach().double()
        self.values[name] = torch.maximum(self.values[name], value) \
            if name in self.values else value

    def stacked(self) -> Tensor:
        if not self.values:
            return torch.zeros(0, dtype=torch.float64, device=self.device)
        return torch.stack(list(self.values.values()))              # (n_sums,)


def _sync(sums: _Sums, watch: NonFiniteWatch, where: str,
          *extra: Tensor) -> tuple[dict[str, float], list[np.ndarray]]:
    """THE host sync: accumulators, the non-finite record and ``extra`` in one transfer.

    Raises ``NonFiniteLossError`` when the watch saw a bad loss; returns the sums by name and
    each ``extra`` tensor as a float64 array of its shape.
    """
    parts = [sums.stacked(), watch.record().double(), *(t.double().reshape(-1) for t in extra)]
    host = torch.cat(parts).cpu().numpy()
    chunks = np.split(host, np.cumsum([t.numel() for t in parts])[:-1])
    watch.check(chunks[1].tolist(), where)
    named = dict(zip(sums.values, chunks[0].tolist(), strict=True))
    return named, [c.reshape(t.shape) for c, t in zip(chunks[2:], extra, strict=True)]


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpochProgress:
    """A training epoch stopped between optimizer steps: what continuing it needs."""

    sums: dict[str, float]   # the device accumulators, read back
    micro: int               # micro-batches consumed
    steps: int               # optimizer steps taken
    n_segments: int
    seconds: float
    lr: float


@dataclass(frozen=True)
class TrainEpochResult:
    loss: float
    loss_class: float
    loss_aux: float
    accuracy: float
    lr: float
    grad_norm_mean: float
    grad_norm_max: float
    skipped_steps: int
    optimizer_steps: int
    n_segments: int
    seconds: float
    stopped: EpochProgress | None = None   # set when ``should_stop`` ended the epoch early

    @property
    def segments_per_s(self) -> float:
        return self.n_segments / self.seconds if self.seconds > 0 else 0.0

    def metrics(self) -> dict[str, float]:
        """The epoch's training figures (the history CSV's and, through
        ``charted_metrics``, the run's)."""
        return {"train/loss": self.loss, "train/loss_class": self.loss_class,
                "train/loss_aux": self.loss_aux, "train/accuracy": self.accuracy,
                "train/lr": self.lr, "train/grad_norm_mean": self.grad_norm_mean,
                "train/grad_norm_max": self.grad_norm_max,
                SKIPPED_STEPS: float(self.skipped_steps),
                "vitals/train_seconds": self.seconds, "vitals/samples_per_s": self.segments_per_s}


SKIPPED_STEPS = "train/skipped_steps"


def charted_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """An epoch's figures as the MLflow run charts them: without ``epoch`` (the step already
    is the epoch: a chart of it over itself says nothing) and with ``train/skipped_steps``
    only where a step was skipped (non-finite loss or gradients): an always-zero chart is
    noise, a chart that appears is an alarm. The history CSV keeps both."""
    return {k: v for k, v in metrics.items()
            if k != "epoch" and not (k == SKIPPED_STEPS and v == 0)}


@dataclass
class _EpochState:
    """Host-side counters of one epoch (no device values)."""

    micro: int = 0
    steps: int = 0
    n_segments: int = 0
    lr: float = 0.0
    start: float = field(default_factory=time.perf_counter)


def train_one_epoch(model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn,
                    optim: Optimization, runtime: Runtime, *, log_every: int = 0, epoch: int = 0,
                    should_stop: Callable[[], bool] | None = None,
                    resume: EpochProgress | None = None) -> TrainEpochResult:
    """One pass over ``batches`` with gradient accumulation; raises on a non-finite loss.

    ``should_stop()`` is polled after every optimizer step; when it says yes the epoch ends
    there and the result's ``stopped`` holds the progress that ``resume`` continues from.
    """
    model.train()
    device = runtime.device
    sums, state = _start_state(device, resume)
    watch = NonFiniteWatch(device)
    for x, y, _ in batches:
        x, y = runtime.to_device(x), y.to(device, non_blocking=True)
        with runtime.autocast():
            logits, leak_logit = model(x)                           # (B, C), (B,)
            parts = loss_fn(logits, leak_logit, y)
        optim.backward(parts.total)
        state.micro += 1
        state.n_segments += len(y)
        watch.update(parts, state.micro)
        sums.add(loss=parts.total * len(y), loss_class=parts.cls * len(y),
                 loss_aux=parts.aux * len(y), correct=(logits.argmax(-1) == y).sum())
        if state.micro % optim.accum_steps == 0:
            _optimizer_step(model, optim, sums, watch, state, log_every, epoch)
            if should_stop is not None and should_stop():
                return _stopped(sums, watch, state, epoch)
    if state.micro % optim.accum_steps:
        _optimizer_step(model, optim, sums, watch, state, log_every, epoch)  # the remainder
    totals, _ = _sync(sums, watch, f"in training epoch {epoch}")
    return _train_result(totals, state)


def _start_state(device: torch.device, resume: EpochProgress | None) -> tuple[_Sums, _EpochState]:
    if resume is None:
        return _Sums(device), _EpochState()
    state = _EpochState(micro=resume.micro, steps=resume.steps, n_segments=resume.n_segments,
                        lr=resume.lr, start=time.perf_counter() - resume.seconds)
    return _Sums.restored(device, resume.sums), state


def _stopped(sums: _Sums, watch: NonFiniteWatch, state: _EpochState,
             epoch: int) -> TrainEpochResult:
    totals, _ = _sync(sums, watch, f"in training epoch {epoch}")
    progress = EpochProgress(sums=totals, micro=state.micro, steps=state.steps,
                             n_segments=state.n_segments,
                             seconds=time.perf_counter() - state.start, lr=state.lr)
    return dataclasses.replace(_train_result(totals, state), stopped=progress)


def _optimizer_step(model: nn.Module, optim: Optimization, sums: _Sums, watch: NonFiniteWatch,
                    state: _EpochState, log_every: int, epoch: int) -> None:
    state.lr = optim.lr
    norm = optim.step(model)
    finite = torch.isfinite(norm)
    sums.add(grad_sum=torch.where(finite, norm, 0.0), grad_finite=finite)
    sums.maximum("grad_max", torch.where(finite, norm, 0.0))
    state.steps += 1
    if log_every and state.steps % log_every == 0:
        running, _ = _sync(sums, watch, f"in training epoch {epoch}")
        log.info("epoch %d step %d: loss %.4f lr %.3g", epoch, state.steps,
                 running["loss"] / max(1, state.n_segments), state.lr)


def _train_result(sums: dict[str, float], state: _EpochState) -> TrainEpochResult:
    n, finite = max(1, state.n_segments), sums.get("grad_finite", 0.0)
    return TrainEpochResult(
        loss=sums.get("loss", float("nan")) / n, loss_class=sums.get("loss_class", 0.0) / n,
        loss_aux=sums.get("loss_aux", 0.0) / n, accuracy=sums.get("correct", 0.0) / n,
        lr=state.lr, grad_norm_mean=sums.get("grad_sum", 0.0) / max(1.0, finite),
        grad_norm_max=sums.get("grad_max", 0.0), skipped_steps=state.steps - int(finite),
        optimizer_steps=state.steps, n_segments=state.n_segments,
        seconds=time.perf_counter() - state.start)
