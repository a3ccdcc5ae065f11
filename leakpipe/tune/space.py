"""The search space: `tune.space` -> Optuna suggestions -> one (model, train) variant per trial.

Parameters are named ``"<section>.<key>"`` (``train.learning_rate``, ``model.dropout``), in the
study, in MLflow and in ``tuning/best_params.yaml``. A few train keys only matter when another
key has a given value (the focal parameters with ``loss: focal``, the clip norm with
``grad_clip: true``); they are suggested only then (``CONDITIONS``), so TPE never models noise.
A variant is made with ``dataclasses.replace`` and re-checked by the strict loader, so a trial
trains with a config that params.yaml could hold, and its values are what `tune apply` writes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from leakpipe.config import ModelConfig, ParamSpec, TrainConfig, TuneConfig, from_mapping
from leakpipe.errors import ConfigError
from leakpipe.tune.names import TRIAL_OVERRIDES

SECTION_TYPES: dict[str, type] = {"model": ModelConfig, "train": TrainConfig}
# "section.key" -> (the "section.key" it depends on, the value that makes it matter)
CONDITIONS: dict[str, tuple[str, Any]] = {
    "train.focal_gamma": ("train.loss", "focal"),
    "train.focal_alpha": ("train.loss", "focal"),
    "train.leak_weight_boost": ("train.loss", "ce"),
    "train.grad_clip_norm": ("train.grad_clip", True),
}
LR_KEY = "train.learning_rate"
BATCH_KEY = "train.batch_size"
SIGNIFICANT_DIGITS = 4  # trial floats are rounded: what a trial trains with is what apply writes


@dataclass(frozen=True)
class Variant:
    """The configs one trial trains with, and the searched values in them."""

    model: ModelConfig
    train: TrainConfig
    values: dict[str, Any]  # "section.key" -> the value trained with (lr already scaled)

    def by_section(self) -> dict[str, dict[str, Any]]:
        return by_section(self.values)


def by_section(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{"train.batch_size": 512} -> {"train": {"batch_size": 512}}: the params.yaml shape."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in sorted(values.items()):
        section, key = name.split(".", 1)
        out.setdefault(section, {})[key] = value
    return out


def space_items(cfg: TuneConfig) -> list[tuple[str, ParamSpec]]:
    """Every searched parameter as ("section.key", spec); parents before dependents."""
    items = [(f"{section}.{key}", spec) for section in SECTION_TYPES
             for key, spec in getattr(cfg.space, section).items()]
    return sorted(items, key=lambda item: item[0] in CONDITIONS)  # stable: keeps file order


def base_values(model: ModelConfig, train: TrainConfig) -> dict[str, Any]:
    """Every "section.key" of the base configs (the values a trial does not search)."""
    return {f"{section}.{key}": value
            for section, cfg in (("model", model), ("train", train))
            for key, value in dataclasses.asdict(cfg).items()}


def is_active(name: str, chosen: Mapping[str, Any], base: Mapping[str, Any]) -> bool:
    """A conditional parameter matters when its parent (chosen, else base) has the value."""
    if name not in CONDITIONS:
        return True
    parent, value = CONDITIONS[name]
    return chosen.get(parent, base.get(parent)) == value


def suggest(trial: optuna.Trial, cfg: TuneConfig, base: Mapping[str, Any]) -> dict[str, Any]:
    """Ask the trial for every active parameter; returns the raw suggested values."""
    chosen: dict[str, Any] = {}
    for name, spec in space_items(cfg):
        if is_active(name, chosen, base):
            chosen[name] = suggest_one(trial, name, spec)
    return chosen


def suggest_one(trial: optuna.Trial, name: str, spec: ParamSpec) -> Any:
    if spec.type == "categorical":
        return trial.suggest_categorical(name, list(spec.choices))
    if spec.type == "int":
        step = int(spec.step) if spec.step is not None else 1
        return trial.suggest_int(name, int(spec.low), int(spec.high), step=step, log=spec.log)
    return trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=spec.log)


def round_significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def effective_values(chosen: Mapping[str, Any], cfg: TuneConfig,
                     base: Mapping[str, Any]) -> dict[str, Any]:
    """Rounded floats; the learning rate scaled by sqrt(batch_size / lr_batch_reference)."""
    values = {k: round_significant(v) if isinstance(v, float) else v for k, v in chosen.items()}
    if LR_KEY in values and cfg.lr_batch_reference > 0:
        batch = values.get(BATCH_KEY, base[BATCH_KEY])
        scale = math.sqrt(batch / cfg.lr_batch_reference)
        values[LR_KEY] = round_significant(values[LR_KEY] * scale)
    return values


def make_variant(model: ModelConfig, train: TrainConfig, cfg: TuneConfig,
                 chosen: Mapping[str, Any], source: str) -> Variant:
    """The trial's configs: base + searched values, trial epochs and compile, strictly checked.

    A value the train stage would reject (e.g. a scaled learning rate below ``eta_min``)
    raises ``ConfigError`` naming ``source`` (the trial), so the trial fails with that reason.
    """
    base = base_values(model, train)
    values = effective_values(chosen, cfg, base)
    sections = Variant(model, train, values).by_section()
    overrides = {key: getattr(cfg, key) for key in TRIAL_OVERRIDES}
    trial_train = dataclasses.replace(train, **overrides, **sections.get("train", {}))
    trial_model = dataclasses.replace(model, **sections.get("model", {}))
    checked = {name: from_mapping(SECTION_TYPES[name], dataclasses.asdict(c), name, source)
               for name, c in (("model", trial_model), ("train", trial_train))}
    return Variant(checked["model"], checked["train"], values)


def check_space(model: ModelConfig, train: TrainConfig, cfg: TuneConfig, source: str) -> None:
    """Every bound and choice must be a value the section accepts; else one ConfigError line."""
    for name, spec in space_items(cfg):
        candidates = spec.choices if spec.type == "categorical" else (spec.low, spec.high)
        for candidate in candidates:
            value = int(candidate) if spec.type == "int" else candidate
            try:
                make_variant(model, train, dataclasses.replace(cfg, lr_batch_reference=0),
                             {name: value}, source)
            except ConfigError as exc:
                reason = str(exc).removeprefix(f"{source}: ")
                raise ConfigError(f"{source}: tune.space.{name}: {value!r} is not a valid "
                                  f"value ({reason})") from None
