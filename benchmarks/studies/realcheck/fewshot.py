"""Few-shot adaptation, leave one recording out, with the project's own ``fit()``.

For each held-out recording the others become a train / val pair of HDF5 splits (the build
format, written by ``SplitWriter``): the clips of each training recording in time order, the
last ``val_share`` of them to val, the rest to train, so both splits hold every training
recording and no clip is in both. Two models are trained on them with the same budget:

- ``finetune``: starts from the synthetic detector's weights through ``train.init_checkpoint``
  (a checkpoint written from the detector file, fresh optimizer);
- ``scratch``: the same model config from random weights.

By default both use the params' learning rate, so the initial weights are the only difference
(``finetune_lr`` sets a separate one).

Both use the params' ``train`` section with the detector's task (binary or not), voting rule
and ``input_norm``; the threshold is the one ``fit`` chose on the val clips of the training
recordings. The HDF5 classes are the detector's data classes, so the task's class names equal
the detector's (``init_checkpoint`` requires it): a real non-leak recording whose class the
detector does not know is labelled ``noleak_as`` (default NORMAL, flow noise without a leak).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.config import DecisionConfig, TrainConfig
from leakpipe.constants import LEAK_CLASS
from leakpipe.data.writer import SplitWriter
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.files import save_torch_atomic
from leakpipe.tracking import NullTracker
from leakpipe.train import checkpoint as ckpt_io
from leakpipe.train.fit import fit
from leakpipe.train.inputs import prepare_training
from realcheck.metrics import ClipTable
from realcheck.scoring import RealRecording, Scoring, score_recordings

log = logging.getLogger(__name__)

METHODS = ("finetune", "scratch")
PLAN = {"placement": "ram", "dtype": "float32", "stream": {"buffer_chunks": 1}}
INIT_NAME = "init.pt"


@dataclass(frozen=True)
class FewShotConfig:
    """The adaptation budget (the same for fine-tuning and training from scratch)."""

    epochs: int = 4
    batch_size: int = 256                # segments per step (a few recordings: ~6,000 a fold)
    finetune_lr: float | None = None     # None = the scratch rate: only the initial weights differ
    scratch_lr: float | None = None      # None = the params' train.learning_rate
    val_share: float = 0.25              # last share of each training recording's clips -> val
    noleak_as: str = "NORMAL"            # data class for a real non-leak class the model lacks
    seed: int = 0


@dataclass(frozen=True)
class MethodResult:
    """One adapted model scored on the held-out recording."""

    table: ClipTable                     # the held-out recording's clips
    threshold: float                     # chosen by fit on the training recordings' val clips
    background: ClipTable | None = None  # val clips of the non-leak training recordings
    fit: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fold:
    held_out: str
    label: str
    train_recordings: tuple[str, ...]
    val_has_both_classes: bool           # False: val holds one class, its threshold is moot
    methods: dict[str, MethodResult]
    background: ClipTable | None = None  # the detector alone on MethodResult.background's clips


def data_labels(detector: Detector, labels: list[str], noleak_as: str) -> dict[str, int]:
    """Real class name -> index into the detector's data classes (unknown non-leak classes
    become ``noleak_as``)."""
    classes = detector.data_class_names
    if LEAK_CLASS not in classes:
        raise DataError(f"detector data classes {list(classes)} lack {LEAK_CLASS}")
    if noleak_as not in classes or noleak_as == LEAK_CLASS:
        raise DataError(f"noleak_as {noleak_as!r} is not a non-leak class of the detector "
                        f"(data classes {list(classes)})")
    return {name: classes.index(name if name in classes else noleak_as)
            for name in sorted(set(labels))}


def time_split(n_clips: int, val_share: float) -> tuple[np.ndarray, np.ndarray]:
    """Clip indices (time order) for train and val: the last ``val_share`` (at least one clip
    when there are two or more) go to val."""
    n_val = min(n_clips - 1, max(1, round(val_share * n_clips))) if n_clips > 1 else 0
    index = np.arange(n_clips)
    return index[:n_clips - n_val], index[n_clips - n_val:]


def write_fold(recordings: list[RealRecording], detector: Detector, label_of: dict[str, int],
               val_share: float, folder: Path) -> tuple[Path, Path]:
    """``folder/train.h5`` and ``folder/val.h5`` from the training recordings (time split)."""
    paths = (folder / "train.h5", folder / "val.h5")
    classes = detector.data_class_names
    with SplitWriter(paths[0], "train", detector.features, classes, dtype="float32") as train, \
            SplitWriter(paths[1], "val", detector.features, classes, dtype="float32") as val:
        for rec in recordings:
            label = label_of[rec.label]
            for writer, rows in zip((train, val), time_split(len(rec.mel), val_share),
                                    strict=True):
                if rows.size:
                    writer.append(rec.mel[rows], label, rec.recording_id, rec.recording_id)
    return paths


def val_parts(recordings: list[RealRecording], val_share: float,
              leak: bool) -> list[RealRecording]:
    """The val clips (``time_split``) of the recordings of one class, as recordings."""
    return [dataclasses.replace(r, mel=r.mel[time_split(len(r.mel), val_share)[1]])
            for r in recordings if r.is_leak == leak]


def write_init_checkpoint(detector: Detector, path: Path) -> Path:
    """A training checkpoint holding the detector's weights, for ``train.init_checkpoint``."""
    ckpt = ckpt_io.make_checkpoint(model=detector.model, epoch=-1, step=0,
                                   class_names=list(detector.class_names))
    save_torch_atomic(ckpt, path)
    return path


def fold_config(base: TrainConfig, detector: Detector, cfg: FewShotConfig,
                init: Path | None) -> TrainConfig:
    """The params' train section with the few-shot budget and the detector's task and rule."""
    scratch_lr = cfg.scratch_lr or base.learning_rate
    lr = (cfg.finetune_lr or scratch_lr) if init is not None else scratch_lr
    return dataclasses.replace(
        base, seed=cfg.seed, epochs=cfg.epochs, batch_size=cfg.batch_size, learning_rate=lr,
        eta_min=min(base.eta_min, lr), warmup_epochs=min(base.warmup_epochs, cfg.epochs),
        binary=detector.binary, input_norm=detector.input_norm,
        init_checkpoint=str(init) if init is not None else "", reset_optimizer=True,
        keep_last_checkpoints=1, log_every_steps=0, compile=False)


def fold_decision(base: DecisionConfig, detector: Detector) -> DecisionConfig:
    """The params' `decision` grid with the detector's own rule and probability mode."""
    voting = detector.voting
    return dataclasses.replace(base, prob_mode=voting.prob_mode, rule=voting.rule,
                               vote_fraction=voting.vote_fraction)


def train_detector(detector: Detector, split_paths: tuple[Path, Path], cfg: TrainConfig,
                   decision: DecisionConfig, checkpoint_dir: Path,
                   scoring: Scoring) -> tuple[Detector, dict[str, Any]]:
    """``fit()`` on the fold's splits -> the adapted detector (val-chosen threshold) and how
    training went."""
    runtime = scoring.runtime
    data = prepare_training(*split_paths, PLAN, cfg, runtime.device, recheck=False)
    try:
        result = fit(detector.model_cfg, cfg, runtime=runtime,
                     decision=fold_decision(decision, detector), train_source=data.train_source,
                     val=data.val, class_counts=data.class_counts,
                     tracker=NullTracker(), checkpoint_dir=checkpoint_dir,
                     features=data.features.to_dict())
    finally:
        data.close()
    adapted = dataclasses.replace(detector, model=result.model.cpu().eval(),
                                  threshold=result.threshold)
    info = {"best_epoch": result.best_epoch, "epochs_run": len(result.history),
            "stop_reason": result.stop_reason, "monitor": result.monitor,
            "val_monitor_value": _finite(result.best_metrics.get(result.monitor, math.nan))}
    return adapted, info


def leave_one_out(detector: Detector, recordings: list[RealRecording], base: TrainConfig,
                  decision: DecisionConfig, cfg: FewShotConfig, work_dir: Path,
                  scoring: Scoring) -> list[Fold]:
    """One fold per recording: fine-tune and from scratch on the others, score the held-out."""
    label_of = data_labels(detector, [r.label for r in recordings], cfg.noleak_as)
    init = write_init_checkpoint(detector, work_dir / INIT_NAME)
    folds = []
    for k, held in enumerate(recordings):
        others = [r for r in recordings if r is not held]
        folder = work_dir / f"fold{k}"
        paths = write_fold(others, detector, label_of, cfg.val_share, folder)
        both = len({r.is_leak for r in others}) == 2
        # a held-out leak is also scored against the unseen val clips of the no-leak recordings
        background = val_parts(others, cfg.val_share, leak=False) if held.is_leak and both \
            else None
        methods = {}
        for method in METHODS:
            train_cfg = fold_config(base, detector, cfg, init if method == "finetune" else None)
            adapted, info = train_detector(detector, paths, train_cfg, decision,
                                           folder / method, scoring)
            scored = score_recordings(adapted, [held], scoring)
            methods[method] = MethodResult(scored.table, adapted.threshold,
                                           _scored(adapted, background, scoring), info)
            log.info("fold %d/%d (held out %s, %s) %s: mean leak prob %.3f, threshold %.2f",
                     k + 1, len(recordings), held.recording_id, held.label, method,
                     scored.table.scores.mean(), adapted.threshold)
        folds.append(Fold(held.recording_id, held.label,
                          tuple(r.recording_id for r in others), both, methods,
                          _scored(detector, background, scoring)))
    return folds


def _scored(detector: Detector, recordings: list[RealRecording] | None,
            scoring: Scoring) -> ClipTable | None:
    return None if recordings is None else score_recordings(detector, recordings, scoring).table


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
