"""One training epoch and one full-split evaluation: small result dataclasses, no I/O.

Batches are ``(x (B, 1, n_mels, T), y (B,) int64 task labels, file index (B,))``. Mixed
precision is one ``torch.autocast`` plus a ``GradScaler(enabled=...)``: no ``if amp:`` branches.
Metrics accumulate on the device; each function syncs with the host once at its end (and at
every ``log_every`` optimizer steps when asked). Validation covers EVERY segment of the split
(the original validated on 40 unshuffled batches, so its metrics described a few files only).

A training epoch can stop between optimizer steps (``should_stop``, polled after each step: a
signal handler's flag) and hand back its ``EpochProgress``; passing that progress back as
``resume`` continues the epoch with the same accumulators, so the finished epoch's metrics equal
an uninterrupted one's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from leakpipe.data.input_norm import NORM_NONE, normalize_clips
from leakpipe.data.schema import leak_index, task_classes, task_labels
from leakpipe.evaluate.metrics import best_index, binary_metrics, diagnose, dominant_class
from leakpipe.evaluate.voting import VotingConfig, decide, file_scores, segment_leak_prob
from leakpipe.train.losses import LossFn, NonFiniteWatch
from leakpipe.train.optim import Optimization

log = logging.getLogger(__name__)

Batch = tuple[Tensor, Tensor, Tensor]
AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
OFF_DTYPE = torch.bfloat16  # any autocast-supported dtype; unused while disabled


@dataclass(frozen=True)
class Precision:
    """Autocast and loss-scaling settings, resolved once per run."""

    device_type: str
    dtype: torch.dtype
    enabled: bool
    scaler: bool

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled)


def resolve_precision(amp: str, device: torch.device) -> Precision:
    """auto = fp16 + GradScaler on CUDA, off elsewhere; bf16 never needs a scaler."""
    mode = ("fp16" if device.type == "cuda" else "off") if amp == "auto" else amp
    if mode == "off":
        return Precision(device.type, OFF_DTYPE, enabled=False, scaler=False)
    return Precision(device.type, AMP_DTYPES[mode], enabled=True, scaler=mode == "fp16")


def to_device(x: Tensor, device: torch.device, channels_last: bool) -> Tensor:
    """float32 on ``device`` (stored data may be float16), optionally channels_last."""
    x = x.to(device, non_blocking=True).float()                     # (B, 1, n_mels, T)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


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
        return {"train/loss": self.loss, "train/loss_class": self.loss_class,
                "train/loss_aux": self.loss_aux, "train/accuracy": self.accuracy,
                "train/lr": self.lr, "train/grad_norm_mean": self.grad_norm_mean,
                "train/grad_norm_max": self.grad_norm_max,
                "train/skipped_steps": float(self.skipped_steps),
                "perf/train_seconds": self.seconds, "perf/samples_per_s": self.segments_per_s}


@dataclass
class _EpochState:
    """Host-side counters of one epoch (no device values)."""

    micro: int = 0
    steps: int = 0
    n_segments: int = 0
    lr: float = 0.0
    start: float = field(default_factory=time.perf_counter)


def train_one_epoch(model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn,
                    optim: Optimization, precision: Precision, *, device: torch.device,
                    channels_last: bool = False, log_every: int = 0, epoch: int = 0,
                    should_stop: Callable[[], bool] | None = None,
                    resume: EpochProgress | None = None) -> TrainEpochResult:
    """One pass over ``batches`` with gradient accumulation; raises on a non-finite loss.

    ``should_stop()`` is polled after every optimizer step; when it says yes the epoch ends
    there and the result's ``stopped`` holds the progress that ``resume`` continues from.
    """
    model.train()
    sums, state = _start_state(device, resume)
    watch = NonFiniteWatch(device)
    for x, y, _ in batches:
        x, y = to_device(x, device, channels_last), y.to(device, non_blocking=True)
        with precision.autocast():
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


# ---------------------------------------------------------------------------------------------
# Evaluation over a whole split
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValData:
    """A whole split for evaluation, read file by file in order.

    ``mel`` is (F, L, S, n_mels, T) and sliceable along F: a NumPy array, a torch tensor (also a
    resident one on the device) or an h5py dataset (streamed).
    """

    mel: Any
    labels: np.ndarray               # (F,) class indices in the task's class space
    class_names: tuple[str, ...]     # the task's classes

    @classmethod
    def from_reader(cls, reader: Any, binary: bool) -> ValData:
        """From a ``SplitReader``: labels and classes mapped by the one label mapping."""
        return cls(mel=reader.mel, labels=task_labels(reader.labels, reader.class_names, binary),
                   class_names=task_classes(reader.class_names, binary))

    @property
    def leak_index(self) -> int:
        return leak_index(self.class_names)

    @property
    def n_files(self) -> int:
        return int(self.mel.shape[0])

    @property
    def segments_per_file(self) -> tuple[int, int]:
        return int(self.mel.shape[1]), int(self.mel.shape[2])


@dataclass(frozen=True)
class EvalSettings:
    """How an evaluation turns outputs into decisions."""

    voting: VotingConfig
    thresholds: np.ndarray       # (K,) file-level threshold grid
    segment_threshold: float
    batch_size: int              # segments per forward pass (rounded down to whole files)
    input_norm: str = NORM_NONE  # per-clip normalisation of the input (train.input_norm)


@dataclass(frozen=True)
class EvalResult:
    loss: float
    accuracy: float                  # segment-level, over every class
    segment: dict[str, float]        # leak metrics per segment at the segment threshold
    file: dict[str, float]           # leak metrics per file at ``threshold``
    threshold: float                 # grid threshold with the best file F1
    file_f1_curve: np.ndarray        # (K,) file F1 per grid threshold
    class_names: tuple[str, ...]
    pred_counts: tuple[int, ...]     # predicted class per segment, counted
    true_counts: tuple[int, ...]
    diagnosis: str | None
    seconds: float
    seg_probs: np.ndarray            # (F, L, S) leak probability per segment
    confusion: np.ndarray            # (C, C) segments: true class (rows) x predicted (columns)
    file_confusion: np.ndarray       # (2, 2) files at ``threshold``: [[tn, fp], [fn, tp]]

    def metrics(self, prefix: str = "val") -> dict[str, float]:
        total = max(1, sum(self.pred_counts))
        out = {f"{prefix}/loss": self.loss, f"{prefix}/accuracy": self.accuracy,
               f"{prefix}/file_threshold": self.threshold, f"perf/{prefix}_seconds": self.seconds}
        out.update({f"{prefix}/seg_{k}": v for k, v in self.segment.items()})
        out.update({f"{prefix}/file_{k}": v for k, v in self.file.items()})
        out.update({f"{prefix}/pred_share/{name}": c / total
                    for name, c in zip(self.class_names, self.pred_counts, strict=True)})
        return out


def evaluate_split(model: nn.Module, data: ValData, loss_fn: LossFn, precision: Precision,
                   settings: EvalSettings, *, device: torch.device,
                   channels_last: bool = False) -> EvalResult:
    """Leak probability of every segment of ``data``, then segment- and file-level metrics."""
    model.eval()
    start = time.perf_counter()
    probs, sums, confusion = _forward_split(model, data, loss_fn, precision, settings,
                                            device=device, channels_last=channels_last)
    n_long, n_short = data.segments_per_file
    seg_probs = probs.reshape(data.n_files, n_long, n_short)        # (F, L, S)
    return _eval_result(seg_probs, sums, confusion, data, settings, time.perf_counter() - start)


def _forward_split(model: nn.Module, data: ValData, loss_fn: LossFn, precision: Precision,
                   settings: EvalSettings, *, device: torch.device,
                   channels_last: bool) -> tuple[np.ndarray, dict[str, float], np.ndarray]:
    n_classes, per_file = len(data.class_names), int(np.prod(data.segments_per_file))
    files_per_batch = max(1, settings.batch_size // per_file)
    labels = torch.as_tensor(data.labels, dtype=torch.int64, device=device)   # (F,)
    sums, watch, probs = _Sums(device), NonFiniteWatch(device), []
    confusion = torch.zeros(n_classes * n_classes, dtype=torch.int64, device=device)
    with torch.inference_mode():
        for start in range(0, data.n_files, files_per_batch):
            x = _segments(data.mel[start:start + files_per_batch], device, channels_last,
                          settings.input_norm)
            y = labels[start:start + files_per_batch].repeat_interleave(per_file)  # (B,)
            with precision.autocast():
                logits, leak_logit = model(x)                       # (B, C), (B,)
                parts = loss_fn(logits, leak_logit, y)
            watch.update(parts, start)
            sums.add(loss=parts.total * len(y))
            probs.append(segment_leak_prob(logits, leak_logit, data.leak_index,
                                           settings.voting.prob_mode))
            cell = y * n_classes + logits.argmax(-1)                # (B,) confusion cell
            confusion.scatter_add_(0, cell, torch.ones_like(cell))  # bincount would sync on CUDA
    totals, (all_probs, counts) = _sync(sums, watch, "in validation", torch.cat(probs),
                                        confusion.view(n_classes, n_classes))
    return all_probs.astype(np.float32), totals, counts.astype(np.int64)


def _segments(block: Any, device: torch.device, channels_last: bool,
              norm: str = NORM_NONE) -> Tensor:
    """(F', L, S, M, T) block of files -> (F' * L * S, 1, M, T) float32 on ``device``,
    each file normalised by ``norm``."""
    x = torch.as_tensor(np.asarray(block)) if not isinstance(block, Tensor) else block
    if norm != NORM_NONE:
        x = normalize_clips(x.to(device, non_blocking=True), norm)   # (F', L, S, M, T)
    return to_device(x.reshape(-1, 1, *x.shape[-2:]), device, channels_last)


def _eval_result(seg_probs: np.ndarray, sums: dict[str, float], confusion: np.ndarray,
                 data: ValData, settings: EvalSettings, seconds: float) -> EvalResult:
    leak = data.leak_index
    file_truth = data.labels == leak                                # (F,)
    seg_truth = np.repeat(file_truth, seg_probs[0].size)            # (F * L * S,)
    seg = binary_metrics(seg_truth, seg_probs.reshape(-1) >= settings.segment_threshold).at(0)
    scores = file_scores(seg_probs, settings.voting.rule, settings.voting.vote_fraction)
    decisions = decide(scores, settings.thresholds)                 # (K, F)
    files = binary_metrics(file_truth, decisions)
    best = best_index(files.f1)
    pred_counts, true_counts = confusion.sum(axis=0), confusion.sum(axis=1)
    notes = [diagnose(file_truth, decisions[best], scores, float(settings.thresholds[best])),
             dominant_class(pred_counts, true_counts, data.class_names)]
    n = max(1, int(confusion.sum()))
    return EvalResult(
        loss=sums.get("loss", float("nan")) / n, accuracy=float(np.trace(confusion)) / n,
        segment=seg, file=files.at(best), threshold=float(settings.thresholds[best]),
        file_f1_curve=files.f1, class_names=data.class_names,
        pred_counts=tuple(int(c) for c in pred_counts),
        true_counts=tuple(int(c) for c in true_counts),
        diagnosis="; ".join(note for note in notes if note) or None, seconds=seconds,
        seg_probs=seg_probs, confusion=confusion,
        file_confusion=np.array([[files.tn[best], files.fp[best]],
                                 [files.fn[best], files.tp[best]]], dtype=np.int64))
