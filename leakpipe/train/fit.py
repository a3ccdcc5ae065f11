"""``fit()``: the one training orchestrator (the train stage and every tuning trial call it).

Seeded and deterministic on CPU; auto-resumes from the newest checkpoint in ``checkpoint_dir``
and then ends exactly where an uninterrupted run would; continual learning from
``train.init_checkpoint``; optional ``torch.compile`` that raises instead of falling back
(ORIGIN fault 7); early stopping on the validation file F1 (val loss when the split holds no
leak); the best epoch's weights are kept and returned.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from leakpipe.config import ModelConfig, TrainConfig
from leakpipe.errors import LeakpipeError
from leakpipe.evaluate.voting import VotingConfig, threshold_grid
from leakpipe.model import create_model
from leakpipe.tracking import Tracker
from leakpipe.train import checkpoint as ckpt_io
from leakpipe.train.early_stopping import BestTracker, EarlyStopping, Mode
from leakpipe.train.loop import (
    Batch,
    EvalResult,
    EvalSettings,
    Precision,
    ValData,
    evaluate_split,
    resolve_precision,
    train_one_epoch,
)
from leakpipe.train.losses import LossConfig, LossFn, build_loss
from leakpipe.train.optim import Optimization, create_optimization, steps_per_epoch

log = logging.getLogger(__name__)

MONITOR_MODES: dict[str, Mode] = {"val/file_f1": "max", "val/loss": "min"}
FALLBACK_MONITOR = "val/loss"
# Params that may change between an interrupted run and its resumption.
RESUME_FREE_KEYS = {"train": ("log_every_steps", "keep_last_checkpoints", "compile",
                              "compile_mode", "init_checkpoint", "reset_optimizer")}
EpochCallback = Callable[[int, dict[str, float]], None]


class CompileError(LeakpipeError):
    """torch.compile failed; training never falls back to eager mode silently."""


class TrainSource(Protocol):
    """Training batches: ``len()`` micro-batches per epoch, the same batches for the same epoch."""

    def __len__(self) -> int: ...

    def epoch(self, epoch: int) -> Iterable[Batch]: ...


@dataclass(frozen=True)
class TorchSetup:
    """What ``configure_torch`` decided for this run."""

    device: torch.device
    precision: Precision
    channels_last: bool


@dataclass(frozen=True)
class FitResult:
    model: nn.Module                 # unwrapped, best epoch's weights, eval mode
    best_epoch: int
    best_metrics: dict[str, float]
    threshold: float                 # file threshold of the best epoch (val/file_threshold)
    monitor: str
    stop_reason: str
    epochs_run: int                  # epochs trained by this call (0 when nothing was left)
    history: list[dict[str, float]]  # one metrics dict per epoch
    diagnoses: list[str]             # the collapse diagnosis per epoch ("" when healthy)
    best_checkpoint: Path | None
    resumed_from: Path | None


@dataclass
class _Run:
    """Everything ``fit`` builds once and then mutates epoch by epoch."""

    cfg: TrainConfig
    setup: TorchSetup
    settings: EvalSettings
    model: nn.Module
    optim: Optimization
    loss_fn: LossFn
    stopper: EarlyStopping
    best: BestTracker
    config: dict[str, dict[str, Any]]
    class_names: tuple[str, ...]
    features: dict[str, Any]
    history: list[dict[str, float]] = field(default_factory=list)
    diagnoses: list[str] = field(default_factory=list)
    best_state: dict[str, torch.Tensor] | None = None
    next_epoch: int = 0
    stop_reason: str = ""


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when available, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise LeakpipeError("train.device: 'cuda' asked for, but no CUDA device is available")
    return torch.device(name)


def configure_torch(cfg: TrainConfig, device: torch.device) -> TorchSetup:
    """Seeds and every torch performance / determinism switch, in one place."""
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    cuda = device.type == "cuda"
    # Deterministic kernels on CPU; on CUDA some (pooling backward) have no such variant.
    torch.use_deterministic_algorithms(not cuda, warn_only=False)
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return TorchSetup(device=device, precision=resolve_precision(cfg.amp, device),
                      channels_last=cfg.channels_last and cuda)


def compile_model(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    """``torch.compile`` when asked; a failure raises ``CompileError``, never falls back."""
    if not cfg.compile:
        return model
    import torch._dynamo

    torch._dynamo.config.suppress_errors = False  # no silent eager fallback at first call
    try:
        return torch.compile(model, mode=cfg.compile_mode)
    except RuntimeError as exc:
        raise CompileError(f"train.compile: torch.compile(mode={cfg.compile_mode!r}) failed: "
                           f"{exc}") from exc


def fit(model_cfg: ModelConfig, train_cfg: TrainConfig, *, train_source: TrainSource,
        val_data: ValData, class_counts: Sequence[int], tracker: Tracker,
        checkpoint_dir: Path, features: Mapping[str, Any] | None = None,
        on_epoch: EpochCallback | None = None) -> FitResult:
    """Train, validate on the whole val split every epoch, checkpoint, stop early.

    ``class_counts`` are the training files per task class (before oversampling);
    ``on_epoch(epoch, metrics)`` runs after each epoch's checkpoint (tuning prunes there).
    """
    setup = configure_torch(train_cfg, resolve_device(train_cfg.device))
    run = _build(model_cfg, train_cfg, setup, len(train_source), val_data, class_counts,
                 features)
    directory = Path(checkpoint_dir)
    resumed = _restore(run, directory)
    runner = compile_model(run.model, train_cfg)
    start = run.next_epoch
    end = start if run.stop_reason else train_cfg.epochs  # a stopped run stays stopped
    for epoch in range(start, end):
        metrics, val = _epoch(run, runner, train_source, val_data, epoch)
        tracker.log_metrics(metrics, step=epoch)
        _decide_and_save(run, metrics, val, epoch, directory)
        if on_epoch is not None:
            on_epoch(epoch, dict(metrics))
        if run.stop_reason:
            break
    return _result(run, directory, resumed, epochs_run=run.next_epoch - start)


def _build(model_cfg: ModelConfig, train_cfg: TrainConfig, setup: TorchSetup, n_batches: int,
           val_data: ValData, class_counts: Sequence[int],
           features: Mapping[str, Any] | None) -> _Run:
    names = tuple(val_data.class_names)
    if len(class_counts) != len(names):
        raise ValueError(f"class_counts has {len(class_counts)} entries for classes {names}")
    model = create_model(model_cfg, len(names)).to(setup.device)
    if setup.channels_last:
        model = model.to(memory_format=torch.channels_last)
    monitor, mode = _monitor(train_cfg, val_data)
    loss_fn = build_loss(LossConfig.from_train(train_cfg), class_counts, val_data.leak_index,
                         setup.device)
    optim = create_optimization(model, train_cfg, setup.device,
                                steps_per_epoch(n_batches, train_cfg.grad_accum_steps),
                                scaler_enabled=setup.precision.scaler)
    return _Run(cfg=train_cfg, setup=setup, settings=_eval_settings(train_cfg),
                model=model, optim=optim, loss_fn=loss_fn,
                stopper=EarlyStopping(monitor, mode, train_cfg.early_stop_patience,
                                      train_cfg.early_stop_min_delta),
                best=BestTracker(mode), class_names=names, features=dict(features or {}),
                config={"model": dataclasses.asdict(model_cfg),
                        "train": dataclasses.asdict(train_cfg)})


def _monitor(cfg: TrainConfig, val_data: ValData) -> tuple[str, Mode]:
    has_leak = bool(np.any(np.asarray(val_data.labels) == val_data.leak_index))
    if cfg.monitor == "val/file_f1" and not has_leak:
        log.warning("the val split holds no LEAK file: early stopping monitors %s instead of %s",
                    FALLBACK_MONITOR, cfg.monitor)
        return FALLBACK_MONITOR, MONITOR_MODES[FALLBACK_MONITOR]
    return cfg.monitor, MONITOR_MODES[cfg.monitor]


def _eval_settings(cfg: TrainConfig) -> EvalSettings:
    return EvalSettings(
        voting=VotingConfig(prob_mode=cfg.prob_mode, rule=cfg.decision_rule,
                            vote_fraction=cfg.vote_fraction),
        thresholds=threshold_grid(cfg.threshold_min, cfg.threshold_max, cfg.threshold_step),
        segment_threshold=cfg.segment_threshold, batch_size=cfg.batch_size)


def _epoch(run: _Run, runner: nn.Module, source: TrainSource, val_data: ValData,
           epoch: int) -> tuple[dict[str, float], EvalResult]:
    setup = run.setup
    train = train_one_epoch(runner, source.epoch(epoch), run.loss_fn, run.optim,
                            setup.precision, device=setup.device,
                            channels_last=setup.channels_last,
                            log_every=run.cfg.log_every_steps, epoch=epoch)
    val = evaluate_split(runner, val_data, run.loss_fn, setup.precision, run.settings,
                         device=setup.device, channels_last=setup.channels_last)
    metrics = {"epoch": float(epoch), **train.metrics(), **val.metrics("val")}
    log.info("epoch %d/%d: train loss %.4f acc %.3f | val loss %.4f file F1 %.3f @ %.2f | "
             "%.0f segments/s | lr %.3g", epoch + 1, run.cfg.epochs, train.loss,
             train.accuracy, val.loss, val.file["f1"], val.threshold, train.segments_per_s,
             train.lr)
    if val.diagnosis:
        log.warning("epoch %d: %s", epoch + 1, val.diagnosis)
    return metrics, val


def _decide_and_save(run: _Run, metrics: dict[str, float], val: EvalResult, epoch: int,
                     directory: Path) -> None:
    value = metrics[run.stopper.monitor]
    stop, reason = run.stopper.step(value)
    improved = run.best.update(value, epoch)
    if improved:
        run.best_state = {k: v.detach().clone().cpu()
                          for k, v in ckpt_io.model_state(run.model).items()}
    run.history.append(metrics)
    run.diagnoses.append(val.diagnosis or "")
    run.next_epoch, run.stop_reason = epoch + 1, reason if stop else ""
    if stop:
        log.info("early stopping after epoch %d: %s", epoch + 1, reason)
    ckpt = _checkpoint_dict(run, epoch, metrics, val)
    ckpt_io.save_checkpoint(ckpt, directory, keep_last=run.cfg.keep_last_checkpoints,
                            is_best=improved)


def _checkpoint_dict(run: _Run, epoch: int, metrics: dict[str, float],
                     val: EvalResult) -> dict[str, Any]:
    return ckpt_io.make_checkpoint(
        model=run.model, epoch=epoch, step=run.optim.scheduler.last_epoch,
        optimizer=run.optim.optimizer.state_dict(), scheduler=run.optim.scheduler.state_dict(),
        scaler=run.optim.scaler.state_dict(),
        sampler={"seed": run.config["train"]["seed"], "next_epoch": epoch + 1},
        early_stopping=run.stopper.state_dict(), best=run.best.state_dict(),
        history=run.history, diagnoses=run.diagnoses, stop_reason=run.stop_reason,
        metrics=metrics, threshold=val.threshold, config=run.config,
        class_names=list(run.class_names), features=run.features)


# ---------------------------------------------------------------------------------------------
# Resume and continual learning
# ---------------------------------------------------------------------------------------------


def _restore(run: _Run, directory: Path) -> Path | None:
    """Resume from the newest checkpoint in ``directory``, else start from init_checkpoint."""
    latest = ckpt_io.latest_checkpoint(directory)
    if latest is not None:
        _resume(run, latest)
        return latest
    if run.cfg.init_checkpoint:
        _init_from(run, Path(run.cfg.init_checkpoint), run.cfg.reset_optimizer)
    return None


def _resume(run: _Run, path: Path) -> None:
    # CPU first: RNG states must stay CPU tensors; weights and moments follow the parameters.
    ckpt = ckpt_io.load_checkpoint(path, map_location="cpu")
    _check_same_run(ckpt, run, path)
    ckpt_io.load_model_state(run.model, ckpt, path)
    run.optim.optimizer.load_state_dict(ckpt["optimizer"])
    run.optim.scheduler.load_state_dict(ckpt["scheduler"])
    run.optim.scaler.load_state_dict(ckpt["scaler"])
    run.stopper.load_state_dict(ckpt["early_stopping"])
    run.best.load_state_dict(ckpt["best"])
    run.history, run.diagnoses = list(ckpt["history"]), list(ckpt["diagnoses"])
    run.next_epoch, run.stop_reason = int(ckpt["epoch"]) + 1, str(ckpt["stop_reason"])
    best_path = path.parent / ckpt_io.BEST_NAME
    if best_path.is_file():
        run.best_state = ckpt_io.load_checkpoint(best_path)["model"]
    ckpt_io.set_rng_state(ckpt["rng"])
    log.info("resumed from %s (epoch %d done)", path, run.next_epoch)


def _check_same_run(ckpt: Mapping[str, Any], run: _Run, path: Path) -> None:
    """A resumed run must have the params and classes of the run that wrote the checkpoint."""
    advice = f"delete {path.parent} to start over, or restore the params"
    if tuple(ckpt.get("class_names", ())) != run.class_names:
        raise ckpt_io.CheckpointError(f"{path}: classes {ckpt.get('class_names')} differ from "
                                      f"this run's {list(run.class_names)}; {advice}")
    saved = ckpt.get("config", {})
    for section, values in run.config.items():
        free = RESUME_FREE_KEYS.get(section, ())
        for key, value in values.items():
            old = saved.get(section, {}).get(key)
            if key not in free and old != value:
                raise ckpt_io.CheckpointError(f"{path}: written with {section}.{key} = {old!r}, "
                                              f"params now say {value!r}; {advice}")


def _init_from(run: _Run, path: Path, reset_optimizer: bool) -> None:
    """Continual learning: start from another run's weights (and optimizer moments)."""
    ckpt = ckpt_io.load_checkpoint(path, map_location="cpu")
    if tuple(ckpt.get("class_names", ())) != run.class_names:
        raise ckpt_io.CheckpointError(f"train.init_checkpoint: {path} was trained on classes "
                                      f"{ckpt.get('class_names')}, this run has "
                                      f"{list(run.class_names)}")
    ckpt_io.load_model_state(run.model, ckpt, path)
    if not reset_optimizer:
        # Moments only: this run's own hyper-parameters and schedule stay in charge.
        current = run.optim.optimizer.state_dict()
        run.optim.optimizer.load_state_dict({"state": ckpt["optimizer"]["state"],
                                             "param_groups": current["param_groups"]})
        run.optim.scaler.load_state_dict(ckpt["scaler"])
    log.info("initialised from %s (optimizer %s)", path,
             "reset" if reset_optimizer else "moments kept")


def _result(run: _Run, directory: Path, resumed: Path | None, epochs_run: int) -> FitResult:
    if run.best_state is not None:
        run.model.load_state_dict(run.best_state)
    run.model.eval()
    best_epoch = run.best.best_epoch
    best_metrics = next((h for h in run.history if int(h["epoch"]) == best_epoch), {})
    best_path = directory / ckpt_io.BEST_NAME
    return FitResult(
        model=run.model, best_epoch=best_epoch, best_metrics=copy.deepcopy(best_metrics),
        threshold=float(best_metrics.get("val/file_threshold", float("nan"))),
        monitor=run.stopper.monitor, stop_reason=run.stop_reason or "completed all epochs",
        epochs_run=epochs_run, history=list(run.history), diagnoses=list(run.diagnoses),
        best_checkpoint=best_path if best_path.is_file() else None, resumed_from=resumed)
