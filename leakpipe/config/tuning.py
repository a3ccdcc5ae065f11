"""The `tune` section: an Optuna study's budget and settings and its search space.

The space names keys of the `model` and `train` sections, so this module reads their
dataclasses (``leakpipe.config.training``) to reject keys that are not tunable.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from leakpipe.config.fields import num
from leakpipe.config.training import ModelConfig, TrainConfig

__all__ = ["TUNE_CHOICE_TYPES", "TUNE_FIXED_TRAIN_KEYS", "ParamSpec", "TuneConfig", "TuneSpace"]


# Train keys a trial never varies: the trial budget, identity and bookkeeping of a run.
TUNE_FIXED_TRAIN_KEYS = ("seed", "binary", "epochs", "compile", "compile_mode",
                         "monitor", "init_checkpoint", "reset_optimizer",
                         "keep_last_checkpoints", "log_every_steps")
TUNE_CHOICE_TYPES = (str, int, float, bool)  # what Optuna stores as a categorical choice


@dataclass(frozen=True, kw_only=True)
class ParamSpec:
    """One searched parameter of `tune.space`: a float / int range or a list of choices."""

    type: Literal["float", "int", "categorical"]
    low: float | None
    high: float | None
    log: bool
    step: float | None
    choices: tuple[Any, ...]

    def problems(self) -> list[tuple[str, str]]:
        if self.type == "categorical":
            return self._choice_problems()
        if self.choices:
            return [("choices", f"must be [] for type {self.type}")]
        if self.low is None or self.high is None:
            return [("low", f"low and high are needed for type {self.type}")]
        if self.low > self.high:
            return [("low", "must not exceed high")]
        if self.log and (self.low <= 0 or self.step is not None):
            return [("log", "needs low > 0 and step null")]
        if self.step is not None and self.step <= 0:
            return [("step", "must be > 0 or null")]
        bounds = (self.low, self.high, 1.0 if self.step is None else self.step)
        if self.type == "int" and any(v != int(v) for v in bounds):
            return [("low", "low, high and step must be whole numbers for type int")]
        return []

    def _choice_problems(self) -> list[tuple[str, str]]:
        if not self.choices:
            return [("choices", "must list at least one value for type categorical")]
        if any(not isinstance(c, TUNE_CHOICE_TYPES) for c in self.choices):
            return [("choices", "values must be numbers, strings or booleans")]
        if (self.low, self.high, self.step, self.log) != (None, None, None, False):
            return [("low", "low, high, step must be null and log false for type categorical")]
        return []


@dataclass(frozen=True, kw_only=True)
class TuneSpace:
    """`tune.space`: searched parameters of the `model` and `train` sections, by key."""

    model: dict[str, ParamSpec]
    train: dict[str, ParamSpec]

    def problems(self) -> list[tuple[str, str]]:
        out = []
        for section, cls, fixed in (("model", ModelConfig, ()),
                                    ("train", TrainConfig, TUNE_FIXED_TRAIN_KEYS)):
            known = {f.name for f in dataclasses.fields(cls)} - set(fixed)
            for name in getattr(self, section):
                if name not in known:
                    out.append((f"{section}.{name}", f"not a tunable {section} key; "
                                                     f"tunable: {sorted(known)}"))
        if not self.model and not self.train:
            out.append(("train", "the space is empty: search at least one parameter"))
        return out


@dataclass(frozen=True, kw_only=True)
class TuneConfig:
    """`tune`: an Optuna study over the training of the `model` + `train` sections."""

    study_name: str
    storage: str
    n_trials: int = num(ge=0)
    timeout_s: float = num(ge=0)
    workers: int = num(ge=1)
    threads_per_worker: int = num(ge=0)
    epochs: int = num(ge=1)
    train_fraction: float = num(gt=0, le=1)
    compile: bool
    objective: Literal["val/clip_f1", "val/seg_f1", "val/loss"]
    direction: Literal["auto", "maximize", "minimize"]
    seed: int = num(ge=0)
    sampler_startup_trials: int = num(ge=0)
    pruner: Literal["median", "hyperband", "none"]
    pruner_startup_trials: int = num(ge=0)
    pruner_warmup_steps: int = num(ge=0)
    hyperband_reduction_factor: int = num(ge=2)
    nan_loss: Literal["prune", "fail"]
    heartbeat_s: int = num(ge=1)
    grace_s: int = num(ge=1)
    max_retry: int = num(ge=0)
    lr_batch_reference: int = num(ge=0)
    space: TuneSpace

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if self.n_trials == 0 and self.timeout_s == 0:
            out.append(("n_trials", "n_trials or timeout_s must be > 0 (the study needs a budget)"))
        if not self.study_name or not self.study_name.replace("-", "").replace("_", "").isalnum():
            out.append(("study_name", "must be letters, digits, '-' or '_'"))
        if self.grace_s <= self.heartbeat_s:
            out.append(("grace_s", "must exceed heartbeat_s"))
        return out
