"""``fit()``: the one training orchestrator (the train stage and every tuning trial call it).

Seeded and deterministic on CPU; auto-resumes from the newest checkpoint in ``checkpoint_dir``
(``leakpipe.train.resume``; mid-epoch too) and then ends exactly where an uninterrupted run
would; continual learning from ``train.init_checkpoint``; optional ``torch.compile`` that raises
instead of falling back (a silent fallback trains a different, slower model); early stopping
on the validation clip F1 (val loss when the split holds no leak); the best epoch's weights
are kept and returned.

``FitOptions`` carries what the train stage adds around the tuning path: a stop flag polled
between optimizer steps (SIGINT / SIGTERM: checkpoint mid-epoch, raise ``StopRequested``), a
diagnostics probe around each epoch's batches (``leakpipe.monitor``), DDP
(``leakpipe.train.distributed``: rank 0 validates, logs and saves), a progress bar and the data
identity that a resumed run must match.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from torch import nn
from tqdm import tqdm

from leakpipe.config import DecisionConfig, ModelConfig, TrainConfig
from leakpipe.model import create_model, model_state
from leakpipe.runtime import Runtime
from leakpipe.tracking import Tracker
from leakpipe.train import checkpoint as ckpt_io
from leakpipe.train.distributed import Distributed
from leakpipe.train.early_stopping import BestTracker, EarlyStopping, Mode
from leakpipe.train.fit_types import (
    EpochProbe,
    EpochSummary,
    FitOptions,
    FitResult,
    TrainSource,
)
from leakpipe.train.interrupt import StopRequested
from leakpipe.train.loop import (
    Batch,
    EpochProgress,
    TrainEpochResult,
    charted_metrics,
    train_one_epoch,
)
from leakpipe.train.losses import LossConfig, build_loss
from leakpipe.train.optim import create_optimization, steps_per_epoch
from leakpipe.train.resume import RESUME_FREE_KEYS, restore, resume_point
from leakpipe.train.state import RunState
from leakpipe.train.torch_setup import CompileError, compile_model, configure_torch
from leakpipe.train.validation import EvalResult, ValSplit, validate

log = logging.getLogger(__name__)

MONITOR_MODES: dict[str, Mode] = {"val/clip_f1": "max", "val/clip_roc_auc": "max",
                                   "val/loss": "min"}
FALLBACK_MONITOR = "val/loss"
FILE_LABELS = ("not LEAK", "LEAK")   # rows / columns of the file-level confusion matrix
EpochCallback = Callable[[int, dict[str, float]], None]
__all__ = ["RESUME_FREE_KEYS", "CompileError", "EpochProbe", "FitOptions", "FitResult",
           "TrainSource", "compile_model", "configure_torch", "fit"]


def fit(model_cfg: ModelConfig, train_cfg: TrainConfig, *, runtime: Runtime,
        decision: DecisionConfig, train_source: TrainSource, val: ValSplit,
        class_counts: Sequence[int], tracker: Tracker,
        checkpoint_dir: Path, features: Mapping[str, Any] | None = None,
        on_epoch: EpochCallback | None = None, options: FitOptions | None = None) -> FitResult:
    """Train, validate on the whole val split every epoch, checkpoint, stop early.

    ``runtime`` says where the network runs (each DDP rank moves it to its own device),
    ``decision`` how validation decides files; ``class_counts`` are the training files per task
    class (before oversampling);
    ``on_epoch(epoch, metrics)`` runs after each epoch's checkpoint (tuning prunes there).
    Raises ``StopRequested`` after checkpointing when ``options.should_stop`` says so.
    """
    opts = options or FitOptions()
    runtime = runtime.on(opts.dist.device(runtime.device))
    configure_torch(train_cfg, runtime)
    run = _build(model_cfg, train_cfg, runtime, decision, len(train_source), val, class_counts,
                 features, opts.data_id)
    directory = Path(checkpoint_dir)
    if opts.dist.is_main:       # the one writer; nothing is writing here yet
        ckpt_io.clear_temporaries(directory)
    resumed = restore(run, directory)
    runner = compile_model(run.model, train_cfg)
    trainer = opts.dist.wrap(runner)   # DDP for the training steps; rank 0 validates `runner`
    start = run.next_epoch
    end = start if run.stop_reason else train_cfg.epochs  # a stopped run stays stopped
    for epoch in range(start, end):
        _stop_if_requested(opts, directory, f"before epoch {epoch + 1}")
        train = _train_epoch(run, trainer, train_source, epoch, opts)
        if train.stopped is not None:
            _stop_mid_epoch(run, train_source, train.stopped, epoch, directory, opts)
        summary = _validate(run, runner, train, train_source, val, epoch, opts)
        if opts.dist.is_main:
            tracker.log_metrics(charted_metrics(summary.metrics), step=epoch)
        _decide_and_save(run, summary, epoch, directory, save=opts.dist.is_main)
        if on_epoch is not None:
            on_epoch(epoch, dict(summary.metrics))
        if run.stop_reason:
            break
    return _result(run, directory, resumed, epochs_run=run.next_epoch - start)


def _build(model_cfg: ModelConfig, train_cfg: TrainConfig, runtime: Runtime,
           decision: DecisionConfig, n_batches: int, val: ValSplit,
           class_counts: Sequence[int], features: Mapping[str, Any] | None,
           data_id: Mapping[str, str] | None) -> RunState:
    names = val.class_names
    if len(class_counts) != len(names):
        raise ValueError(f"class_counts has {len(class_counts)} entries for classes {names}")
    model = runtime.place(create_model(model_cfg, len(names)))
    monitor, mode = _monitor(train_cfg, val)
    loss_fn = build_loss(LossConfig.from_train(train_cfg), class_counts,
                         val.leak_index, runtime.device)
    optim = create_optimization(model, train_cfg, runtime.device,
                                steps_per_epoch(n_batches, train_cfg.grad_accum_steps),
                                scaler_enabled=runtime.scaler)
    config = {"model": dataclasses.asdict(model_cfg), "train": dataclasses.asdict(train_cfg),
              "decision": dataclasses.asdict(decision),
              # the GradScaler state only fits a run with the same loss scaling
              "runtime": {"grad_scaler": runtime.scaler}}
    if data_id:
        config["data"] = dict(data_id)
    return RunState(cfg=train_cfg, runtime=runtime, decision=decision,
                    model=model, optim=optim, loss_fn=loss_fn,
                    stopper=EarlyStopping(monitor, mode, train_cfg.early_stop_patience,
                                          train_cfg.early_stop_min_delta),
                    best=BestTracker(mode), class_names=names, features=dict(features or {}),
                    config=config)


def _monitor(cfg: TrainConfig, val: ValSplit) -> tuple[str, Mode]:
    has_leak = bool(np.any(np.asarray(val.labels) == val.leak_index))
    if cfg.monitor in ("val/clip_f1", "val/clip_roc_auc") and not has_leak:
        log.warning("the val split holds no LEAK file: early stopping monitors %s instead of %s",
                    FALLBACK_MONITOR, cfg.monitor)
        return FALLBACK_MONITOR, MONITOR_MODES[FALLBACK_MONITOR]
    return cfg.monitor, MONITOR_MODES[cfg.monitor]


# ---------------------------------------------------------------------------------------------
# One epoch: train (all ranks), validate (rank 0), decide and checkpoint
# ---------------------------------------------------------------------------------------------


def _train_epoch(run: RunState, trainer: nn.Module, source: TrainSource, epoch: int,
           opts: FitOptions) -> TrainEpochResult:
    resume = _resume_point(run, source, epoch, opts.dist)
    batches: Iterable[Batch] = source.epoch(epoch)
    if opts.probe is not None:
        batches = opts.probe.batches(epoch, batches)
    with tqdm(batches, total=len(source), initial=resume.micro if resume else 0,
              desc=f"epoch {epoch + 1}/{run.cfg.epochs}", unit="batch", leave=False,
              disable=not (opts.progress and opts.dist.is_main)) as bar:
        return train_one_epoch(trainer, bar, run.loss_fn, run.optim, run.runtime,
                               log_every=run.cfg.log_every_steps, epoch=epoch,
                               should_stop=_stop_poll(opts), resume=resume)


def _resume_point(run: RunState, source: TrainSource, epoch: int,
                  dist: Distributed) -> EpochProgress | None:
    """Position the source and the accumulators where a mid-epoch checkpoint left off."""
    pending, run.pending = run.pending, None
    if pending is None or int(pending["epoch"]) != epoch:
        return None
    source.load_state_dict(pending["source"])   # type: ignore[attr-defined]
    progress = pending["progress"]
    if len(progress) != dist.world_size:
        log.warning("mid-epoch checkpoint of %d processes, this run has %d: epoch %d's "
                    "training metrics cover only the steps after the resume", len(progress),
                    dist.world_size, epoch + 1)
        return None
    return EpochProgress(**progress[dist.rank])


def _stop_poll(opts: FitOptions) -> Callable[[], bool] | None:
    if opts.should_stop is None:
        return None
    should_stop, dist = opts.should_stop, opts.dist
    return lambda: dist.any(should_stop())    # every rank stops at the same step


def _stop_if_requested(opts: FitOptions, directory: Path, where: str) -> None:
    stop = _stop_poll(opts)
    if stop is not None and stop():
        start = resume_point(directory)     # a resumed partial.pt, not yet superseded, too
        log.info("stop requested %s; last checkpoint %s", where, start)
        raise StopRequested(f"stopped {where}", start)


def _stop_mid_epoch(run: RunState, source: TrainSource, progress: EpochProgress, epoch: int,
                    directory: Path, opts: FitOptions) -> NoReturn:
    """Checkpoint the state after the last step (with the source position), then stop."""
    every_rank = opts.dist.gather(dataclasses.asdict(progress))
    path = None
    state_dict = getattr(source, "state_dict", None)
    if opts.dist.is_main and state_dict is not None:
        last = run.history[-1] if run.history else {}
        ckpt = _checkpoint_dict(run, epoch - 1, last, confusion=None)
        ckpt["partial"] = {"epoch": epoch, "source": state_dict(), "progress": every_rank}
        path = ckpt_io.save_partial(ckpt, directory)
    elif state_dict is None:
        log.info("this batch source cannot resume mid-epoch: epoch %d restarts", epoch + 1)
    opts.dist.barrier()   # rank 0's checkpoint is on disk before any rank exits
    if path is None:      # no partial.pt from this stop: the re-run starts where restore says
        path = resume_point(directory)
    log.info("stop requested: stopped in epoch %d after %d of %d optimizer steps; "
             "checkpoint %s", epoch + 1, progress.steps,
             steps_per_epoch(len(source), run.optim.accum_steps), path)
    raise StopRequested(f"stopped in epoch {epoch + 1} after {progress.steps} steps", path)


def _validate(run: RunState, runner: nn.Module, train: TrainEpochResult, source: TrainSource,
              val: ValSplit, epoch: int, opts: FitOptions) -> EpochSummary:
    """Rank 0 validates the whole split; every rank gets its metrics, diagnosis, confusion."""
    train = opts.dist.reduce_train(train)
    summary = None
    if opts.dist.is_main:
        probe = opts.probe.epoch_metrics(epoch, source) if opts.probe is not None else {}
        result = validate(runner, val, run.loss_fn, run.decision, run.runtime)
        metrics = {"epoch": float(epoch), **train.metrics(), **probe, **result.metrics("val")}
        _log_epoch(run, epoch, train, result)
        summary = EpochSummary(metrics, result.diagnosis or "", _confusion(result))
    return opts.dist.broadcast(summary)


def _log_epoch(run: RunState, epoch: int, train: TrainEpochResult, val: EvalResult) -> None:
    log.info("epoch %d/%d: train loss %.4f acc %.3f | val loss %.4f clip F1 %.3f @ %.2f | "
             "%.0f segments/s | lr %.3g", epoch + 1, run.cfg.epochs, train.loss,
             train.accuracy, val.loss, val.file["f1"], val.threshold, train.segments_per_s,
             train.lr)
    if val.diagnosis:
        log.warning("epoch %d: %s", epoch + 1, val.diagnosis)


def _confusion(val: EvalResult) -> dict[str, Any]:
    """Plain-list confusion matrices of one validation (segments by class, files by leak)."""
    return {"class_names": list(val.class_names), "segment": val.confusion.tolist(),
            "file_labels": list(FILE_LABELS), "file": val.file_confusion.tolist(),
            "threshold": val.threshold}


def _decide_and_save(run: RunState, summary: EpochSummary, epoch: int, directory: Path,
                     save: bool) -> None:
    metrics = summary.metrics
    value = metrics[run.stopper.monitor]
    stop, reason = run.stopper.step(value)
    improved = run.best.update(value, epoch)
    if improved:
        run.best_state = {k: v.detach().clone().cpu()
                          for k, v in model_state(run.model).items()}
        run.best_confusion = summary.confusion
    run.history.append(metrics)
    run.diagnoses.append(summary.diagnosis)
    run.next_epoch, run.stop_reason = epoch + 1, reason if stop else ""
    if stop:
        log.info("early stopping after epoch %d: %s", epoch + 1, reason)
    if save:
        ckpt = _checkpoint_dict(run, epoch, metrics, summary.confusion)
        ckpt_io.save_checkpoint(ckpt, directory, keep_last=run.cfg.keep_last_checkpoints,
                                is_best=improved)
        ckpt_io.drop_partial(directory)


def _checkpoint_dict(run: RunState, epoch: int, metrics: dict[str, float],
                     confusion: dict[str, Any] | None) -> dict[str, Any]:
    return ckpt_io.make_checkpoint(
        model=run.model, epoch=epoch, step=run.optim.scheduler.last_epoch,
        optimizer=run.optim.optimizer.state_dict(), scheduler=run.optim.scheduler.state_dict(),
        scaler=run.optim.scaler.state_dict(),
        sampler={"seed": run.config["train"]["seed"], "next_epoch": epoch + 1},
        early_stopping=run.stopper.state_dict(), best=run.best.state_dict(),
        history=run.history, diagnoses=run.diagnoses, stop_reason=run.stop_reason,
        metrics=metrics, threshold=float(metrics.get("val/clip_threshold", float("nan"))),
        confusion=confusion, best_model=run.best_state, best_confusion=run.best_confusion,
        config=run.config, class_names=list(run.class_names), features=run.features)


def _result(run: RunState, directory: Path, resumed: Path | None,
            epochs_run: int) -> FitResult:
    if run.best_state is not None:
        run.model.load_state_dict(run.best_state)
    run.model.eval()
    best_epoch = run.best.best_epoch
    best_metrics = next((h for h in run.history if int(h["epoch"]) == best_epoch), {})
    best_path = directory / ckpt_io.BEST_NAME
    return FitResult(
        model=run.model, best_epoch=best_epoch, best_metrics=copy.deepcopy(best_metrics),
        threshold=float(best_metrics.get("val/clip_threshold", float("nan"))),
        monitor=run.stopper.monitor, stop_reason=run.stop_reason or "completed all epochs",
        epochs_run=epochs_run, history=list(run.history), diagnoses=list(run.diagnoses),
        best_checkpoint=best_path if best_path.is_file() else None, resumed_from=resumed,
        best_confusion=copy.deepcopy(run.best_confusion))
