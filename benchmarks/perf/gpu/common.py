"""What every GPU check shares: constants and tolerances, the synthetic splits, the params
sections, fit() as the train stage runs it, and small helpers (a check raises CheckFailed
through ``require`` when what it checks does not hold).
"""

from __future__ import annotations

import dataclasses
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[3]
PARAMS = REPO / "params.yaml"
SEED = 0
CLIPS_PER_RECORDING = 2
SITES = 4
CLASS_BAND_DB = 8.0        # the synthetic classes differ by this much in a band of mels
STORED = torch.float16     # splits are stored and batched as float16 (the preload default)
SAMPLE_S = 0.1             # NVML / system sampling interval of the checks
FP32_TOL = 1e-3            # batched vs per-file probabilities, float32 (TF32 convolutions)
FP16_TOL = 1e-2            # the same under fp16 autocast
ADAM_TOL = 1e-5            # fused vs unfused AdamW parameters after 3 steps on equal gradients
SYNCED_STEPS = 50          # steps timed one by one with a synchronize each (at most)
DDP_TIMEOUT_S = 300
ERROR_CHARS = 300


class CheckFailed(Exception):
    """A check ran but what it checks does not hold."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


@dataclass(frozen=True)
class Setup:
    """What every check shares: where the data is and the params sections."""

    root: Path
    train: Path
    val: Path
    device: torch.device
    model: Any      # ModelConfig
    cfg: Any        # TrainConfig, 1 epoch
    decision: Any   # DecisionConfig
    monitor: Any    # MonitorConfig
    evaluate: Any   # EvaluateConfig
    preload: Any    # PreloadConfig
    features: Any   # FeatureConfig
    seconds: float  # per measured stretch of training (train_step_profile)


def load_setup(root: Path, device: torch.device, seconds: float) -> Setup:
    from leakpipe.config import load_section

    cfg = dataclasses.replace(load_section(PARAMS, "train"), epochs=1, compile=False,
                              init_checkpoint="", log_every_steps=0, keep_last_checkpoints=1)
    return Setup(root=root, train=root / "train.h5", val=root / "val.h5", device=device,
                 model=load_section(PARAMS, "model"), cfg=cfg,
                 decision=load_section(PARAMS, "decision"),
                 monitor=load_section(PARAMS, "monitor"),
                 evaluate=load_section(PARAMS, "evaluate"),
                 preload=load_section(PARAMS, "preload"),
                 features=load_section(PARAMS, "build").features, seconds=seconds)


def write_split(path: Path, split: str, features: Any, n_files: int, seed: int) -> None:
    """Random log-mel clips; class c is CLASS_BAND_DB louder in its own band of mels."""
    from leakpipe.constants import KNOWN_CLASSES
    from leakpipe.data.writer import SplitWriter

    rng = np.random.default_rng(seed)
    n_classes, n_mels = len(KNOWN_CLASSES), features.n_mels
    band = max(1, n_mels // n_classes)
    with SplitWriter(path, split, features, KNOWN_CLASSES) as writer:
        for rec in range(max(n_classes, n_files // CLIPS_PER_RECORDING)):
            label = rec % n_classes
            mel = rng.normal(-40.0, 10.0, (CLIPS_PER_RECORDING, *features.segment_shape))
            mel[..., label * band:(label + 1) * band, :] += CLASS_BAND_DB
            writer.append(mel.astype(np.float16), label, f"{split}/rec{rec}",
                          f"{split}-site{rec % SITES}")


def runtime_for(setup: Setup, amp: str, channels_last: bool = True) -> Any:
    from leakpipe.runtime import make_runtime

    return make_runtime(setup.device, amp, channels_last)


def class_counts(info: Any) -> list[int]:
    return np.bincount(info.file_labels, minlength=len(info.classes)).tolist()


def run_fit(setup: Setup, runtime: Any, name: str, *, placement: str, compile: bool = False,
            probe: Any = None, dist: Any = None,
            should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """One epoch of ``fit()`` as the train stage runs it; its figures and checkpoint files."""
    from leakpipe.data.batches import make_eval_batches, make_train_source
    from leakpipe.tracking import NullTracker
    from leakpipe.train import checkpoint as ckpt_io
    from leakpipe.train.distributed import Distributed
    from leakpipe.train.fit import FitOptions, fit
    from leakpipe.train.validation import ValSplit

    cfg = dataclasses.replace(setup.cfg, compile=compile)
    source = make_train_source(
        setup.train, placement, cfg.batch_size, seed=cfg.seed, binary=cfg.binary,
        device=runtime.device, dtype=STORED, leak_oversample=cfg.leak_oversample_factor,
        input_norm=cfg.input_norm, augment=cfg.augment)
    val = ValSplit(make_eval_batches(setup.val, placement, cfg.batch_size, binary=cfg.binary,
                                     device=runtime.device, dtype=STORED,
                                     input_norm=cfg.input_norm))
    directory = setup.root / f"checkpoints-{name}"
    options = FitOptions(probe=probe, dist=dist or Distributed.single(), should_stop=should_stop)
    start = time.perf_counter()
    result = fit(setup.model, cfg, runtime=runtime, decision=setup.decision,
                 train_source=source, val=val, class_counts=class_counts(source.info),
                 tracker=NullTracker(), checkpoint_dir=directory,
                 features=setup.features.to_dict(), options=options)
    seconds = time.perf_counter() - start
    metrics = result.history[-1]
    require(math.isfinite(metrics["train/loss"]), f"train loss {metrics['train/loss']}")
    require(math.isfinite(metrics["val/loss"]), f"val loss {metrics['val/loss']}")
    files = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    require(result.best_checkpoint is not None and bool(ckpt_io.epoch_checkpoints(directory)),
            f"no checkpoint written in {directory} (found {files})")
    ckpt = ckpt_io.load_checkpoint(result.best_checkpoint)
    return {"runtime": runtime.describe(), "placement": placement, "fit_seconds": seconds,
            "train_loss": metrics["train/loss"], "val_loss": metrics["val/loss"],
            "val_clip_f1": metrics["val/clip_f1"],
            "skipped_steps": metrics["train/skipped_steps"],
            "samples_per_s": metrics["perf/samples_per_s"], "checkpoint_files": files,
            "scaler_state": {k: float(v) for k, v in ckpt["scaler"].items()
                             if isinstance(v, int | float)},
            "metrics": {k: v for k, v in metrics.items() if k.startswith("perf/")},
            "_model": result.model}


def first_batch(setup: Setup, runtime: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """One training batch of the train split (as stored), on the device."""
    from leakpipe.data.resident_source import ResidentSource
    from leakpipe.data.split_info import load_resident

    data = load_resident(setup.train, "ram", runtime.device, binary=setup.cfg.binary)
    x, y, _ = next(iter(ResidentSource(data, setup.cfg.batch_size, seed=SEED)))
    return x, y


def autocast_dtype(model: torch.nn.Module, runtime: Any, x: torch.Tensor) -> str:
    with torch.no_grad(), runtime.autocast():
        logits, _ = model(runtime.to_device(x))
    return str(logits.dtype).removeprefix("torch.")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def public(details: dict[str, Any]) -> dict[str, Any]:
    """``details`` without the entries kept for other checks (names starting with _)."""
    return {k: v for k, v in details.items() if not k.startswith("_")}


def train_info(setup: Setup) -> Any:
    """The train split's ``SplitInfo`` (classes, labels, shapes)."""
    from leakpipe.data.split_info import read_split_info

    return read_split_info(setup.train, setup.cfg.binary)


def make_loss(setup: Setup, info: Any) -> Any:
    """The train stage's loss for ``info``'s classes, on the setup's device."""
    from leakpipe.train.losses import LossConfig, build_loss

    return build_loss(LossConfig.from_train(setup.cfg), class_counts(info), info.leak_label,
                      setup.device)


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message (at file:line)``, at most ERROR_CHARS characters."""
    text = str(exc).strip().splitlines()
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    line = f"{type(exc).__name__}: {text[0] if text else ''}{where}"
    return line[:ERROR_CHARS]
