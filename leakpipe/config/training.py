"""Training-side sections: the network, batch augmentation, optimisation and training
diagnostics (`model`, `train`, `train.augment`, `monitor`).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from leakpipe.config.fields import num

__all__ = ["INPUT_NORMS", "MODEL_WIDTHS", "AugmentConfig", "InputNorm", "ModelConfig",
           "MonitorConfig", "TrainConfig"]


MODEL_WIDTHS = 3  # LeakCNN has exactly three conv layers


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """`model`: the LeakCNN network (the original LeakCNNMulti)."""

    widths: tuple[int, ...]
    dropout: float = num(ge=0, lt=1)
    pool_h: int = num(ge=1)
    hidden: int = num(ge=1)

    def problems(self) -> list[tuple[str, str]]:
        if len(self.widths) != MODEL_WIDTHS or min(self.widths, default=0) < 1:
            return [("widths", f"must be {MODEL_WIDTHS} positive channel counts")]
        return []


InputNorm = Literal["none", "clip_level", "clip_band"]   # leakpipe.data.input_norm
INPUT_NORMS: tuple[str, ...] = typing.get_args(InputNorm)


@dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """`train.augment`: log-mel augmentation of training batches (never val / evaluate / predict).

    ``enabled: false`` leaves the batches bit-identical to plain training; each amount at 0
    switches its operation off. See leakpipe.data.augment and docs/training.md.
    """

    enabled: bool
    gain_db: float = num(ge=0)
    tilt_db_per_octave: float = num(ge=0)
    eq_bumps: int = num(ge=0)
    eq_bump_db: float = num(ge=0)
    eq_bump_octaves: float = num(gt=0)
    mix_prob: float = num(ge=0, le=1)
    mix_snr_min_db: float
    mix_snr_max_db: float
    freq_masks: int = num(ge=0)
    freq_mask_bands: int = num(ge=1)
    freq_mask_value: Literal["mean", "min"]

    def problems(self) -> list[tuple[str, str]]:
        if self.mix_snr_min_db > self.mix_snr_max_db:
            return [("mix_snr_min_db", "must not exceed mix_snr_max_db")]
        return []


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """`train`: optimisation, loss, early stopping, checkpoints."""

    seed: int = num(ge=0)
    binary: bool
    epochs: int = num(ge=1)
    batch_size: int = num(ge=1)
    learning_rate: float = num(gt=0)
    weight_decay: float = num(ge=0)
    warmup_epochs: float = num(ge=0)
    eta_min: float = num(ge=0)
    grad_accum_steps: int = num(ge=1)
    grad_clip: bool
    grad_clip_norm: float = num(gt=0)
    compile: bool
    compile_mode: Literal["default", "reduce-overhead", "max-autotune",
                          "max-autotune-no-cudagraphs"]
    loss: Literal["ce", "focal"]
    focal_gamma: float = num(ge=0)
    focal_alpha: float = num(ge=0, le=1)
    leak_weight_boost: float = num(gt=0)
    leak_aux_weight: float = num(ge=0)
    leak_oversample_factor: int = num(ge=1)
    monitor: Literal["val/file_f1", "val/loss"]
    early_stop_patience: int = num(ge=1)
    early_stop_min_delta: float = num(ge=0)
    keep_last_checkpoints: int = num(ge=1)
    init_checkpoint: str
    reset_optimizer: bool
    log_every_steps: int = num(ge=0)
    input_norm: InputNorm
    augment: AugmentConfig

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if self.eta_min > self.learning_rate:
            out.append(("eta_min", "must not exceed learning_rate"))
        if self.warmup_epochs > self.epochs:
            out.append(("warmup_epochs", "must not exceed epochs"))
        return out


@dataclass(frozen=True, kw_only=True)
class MonitorConfig:
    """`monitor`: training diagnostics (system / GPU sampling, step-time profile)."""

    enabled: bool
    interval_s: float = num(gt=0)
    gpu: bool
    spike_factor: float = num(gt=1)
    max_spikes: int = num(ge=0)
    mlflow_system_metrics: bool
    mlflow_interval_s: float = num(gt=0)
