"""Training-side sections: the network, batch augmentation, optimisation and training
diagnostics (`model`, `train`, `train.augment`, `monitor`).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from leakpipe.config.fields import num

__all__ = ["ADDED_DEFAULTS", "INPUT_NORMS", "MODEL_WIDTHS", "AugmentConfig", "InputNorm",
           "ModelConfig", "MonitorConfig", "TrainConfig", "with_added_defaults",
           "without_added_defaults"]


MODEL_WIDTHS = 3  # LeakCNN has exactly three conv layers
# Keys added after model files, checkpoints and studies were written: the value that one
# without the key means (the behaviour from before the key existed).
ADDED_DEFAULTS: dict[str, dict[str, Any]] = {
    "model": {"level_input": False, "tonal_median": 0},
    "train": {"label_smoothing": 0.0},
}


def with_added_defaults(section: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` of a file written before some keys of ``section`` existed, those filled in."""
    return {**ADDED_DEFAULTS.get(section, {}), **values}


def without_added_defaults(section: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` less the added keys that hold their old meaning (what older files held)."""
    added = ADDED_DEFAULTS.get(section, {})
    return {k: v for k, v in values.items() if k not in added or v != added[k]}


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """`model`: the LeakCNN network (the original LeakCNNMulti).

    ``level_input`` (leakpipe.model.LevelFeatures): the convolutions see each segment minus its
    own mean log-mel (spectral shape only) and the hidden layer also gets the segment's level
    and LEVEL_BANDS coarse band levels, batch-normalised. What the level is depends on
    ``train.input_norm``: with ``none`` the absolute level at the sensor (comparable across
    sensors of one model at one gain), with ``clip_level`` / ``clip_band`` the segment's level
    relative to its own clip (the clip's loudness removed). False: the original network, bit
    for bit; model files without the key mean false.

    ``tonal_median`` (leakpipe.model.tonal_median): 0 = off, else an odd number of mel bands;
    the convolutions see the spectrum after a running median over that many bands (narrow
    tonal lines removed, broadband envelopes kept). Model files without the key mean 0.
    """

    widths: tuple[int, ...]
    dropout: float = num(ge=0, lt=1)
    pool_h: int = num(ge=1)
    hidden: int = num(ge=1)
    level_input: bool = False
    tonal_median: int = num(0, ge=0)

    def problems(self) -> list[tuple[str, str]]:
        if len(self.widths) != MODEL_WIDTHS or min(self.widths, default=0) < 1:
            return [("widths", f"must be {MODEL_WIDTHS} positive channel counts")]
        if self.tonal_median and self.tonal_median % 2 == 0:
            return [("tonal_median", f"must be 0 (off) or odd, got {self.tonal_median}")]
        return []


InputNorm = Literal["none", "clip_level", "clip_band"]   # leakpipe.data.input_norm
INPUT_NORMS: tuple[str, ...] = typing.get_args(InputNorm)


@dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """`train.augment`: log-mel augmentation of training batches (never val / evaluate / predict).

    ``enabled: false`` leaves the batches bit-identical to plain training; each amount at 0
    switches its operation off. See leakpipe.data.augment and docs/training.md.

    ``band_limit_prob``: the share of training files (drawn per file and epoch) whose bands
    above a Nyquist frequency drawn from ``band_limit_hz`` (those of common logger rates below
    the model's) become what the build makes of a recording at that rate
    (``leakpipe.data.empty_band``).
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
    band_limit_prob: float = num(ge=0, le=1)
    band_limit_hz: tuple[float, ...]

    def problems(self) -> list[tuple[str, str]]:
        if self.mix_snr_min_db > self.mix_snr_max_db:
            return [("mix_snr_min_db", "must not exceed mix_snr_max_db")]
        if self.band_limit_prob > 0 and not self.band_limit_hz:
            return [("band_limit_hz", "needs at least one frequency when band_limit_prob > 0")]
        for hz in self.band_limit_hz:
            if not (math.isfinite(hz) and hz > 0 and (2 * hz).is_integer()):
                return [("band_limit_hz", f"{hz!r} is not the Nyquist frequency of an integer "
                                          "sample rate (e.g. 2048.0 for 4096 Hz loggers)")]
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
    label_smoothing: float = num(0.0, ge=0, lt=0.5)  # class CE / focal and the aux leak BCE
    monitor: Literal["val/clip_f1", "val/clip_roc_auc", "val/loss"]
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
