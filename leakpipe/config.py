"""Typed, frozen configuration: one dataclass per params.yaml section, loaded strictly.

Every key in params.yaml maps to exactly one field here. Loading rejects unknown keys, missing
keys, wrong types and out-of-range values with a one-line ``ConfigError`` naming the file and the
dotted key. Variants are made with ``dataclasses.replace``; nothing mutates a loaded config.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from leakpipe.constants import KNOWN_CLASSES
from leakpipe.errors import ConfigError

__all__ = ["ConfigError", "load_section", "from_mapping", "read_params", "SECTIONS"]


def _range(*, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None) -> dict[str, float]:
    """Field metadata for numeric bounds, checked by the loader."""
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    return {k: v for k, v in bounds.items() if v is not None}


def num(default: Any = dataclasses.MISSING, **bounds: float) -> Any:
    """A numeric field with bounds (``ge``, ``gt``, ``le``, ``lt``)."""
    return field(default=default, metadata=_range(**bounds))


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """`synth`: the embedded default recordings (a physically motivated generator)."""

    seed: int = num(ge=0)
    classes: tuple[str, ...]
    n_sites: int = num(ge=3)
    recordings_per_class: int = num(ge=1)
    leak_share: float = num(gt=0, lt=1)
    scale: float = num(gt=0)
    sample_rates: tuple[int, ...]
    duration_s: float = num(gt=0)
    difficulty: float = num(ge=0, le=3)
    transient_rate_hz: float = num(ge=0)
    gain_db: float = num(ge=0, le=40)
    clip_share: float = num(ge=0, le=1)
    dc_share: float = num(ge=0, le=1)
    subtype: Literal["PCM_16", "PCM_24", "FLOAT"]
    workers: int = num(ge=0)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        unknown = [c for c in self.classes if c not in KNOWN_CLASSES]
        if unknown:
            out.append(("classes", f"unknown class {unknown[0]!r}; known: {list(KNOWN_CLASSES)}"))
        if "LEAK" not in self.classes:
            out.append(("classes", "must contain LEAK"))
        if len(self.classes) < 2 or len(set(self.classes)) != len(self.classes):
            out.append(("classes", "needs at least two distinct classes"))
        if not self.sample_rates or min(self.sample_rates) < 1000:
            out.append(("sample_rates", "needs at least one rate, each >= 1000 Hz"))
        return out


@dataclass(frozen=True, kw_only=True)
class FeatureConfig:
    """The feature definition stored with every HDF5 split and every model.

    Not a params section of its own: it is the feature subset of `build` (see
    ``BuildConfig.features``), so that `dvc exp run -S build.n_mels=32` changes it.
    """

    sample_rate: int = num(ge=1000)
    clip_s: float = num(gt=0)
    long_window_s: float = num(gt=0)
    long_hop_s: float = num(gt=0)
    short_window: int = num(ge=8)
    short_hop: int = num(ge=1)
    n_fft: int = num(ge=8)
    hop_length: int = num(ge=1)
    n_mels: int = num(ge=1)
    fmin: float = num(ge=0)
    fmax: float = num(gt=0)
    power: float = num(gt=0)
    log_floor: float = num(gt=0)

    @property
    def clip_samples(self) -> int:
        return int(round(self.clip_s * self.sample_rate))

    @property
    def long_window(self) -> int:
        return int(round(self.long_window_s * self.sample_rate))

    @property
    def long_hop(self) -> int:
        return int(round(self.long_hop_s * self.sample_rate))

    @property
    def n_long(self) -> int:
        return 1 + (self.clip_samples - self.long_window) // self.long_hop

    @property
    def n_short(self) -> int:
        return 1 + (self.long_window - self.short_window) // self.short_hop

    @property
    def n_frames(self) -> int:
        return 1 + (self.short_window - self.n_fft) // self.hop_length

    @property
    def segment_shape(self) -> tuple[int, int, int, int]:
        """Shape of one clip's features: (n_long, n_short, n_mels, n_frames)."""
        return (self.n_long, self.n_short, self.n_mels, self.n_frames)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if self.long_window > self.clip_samples:
            out.append(("long_window_s", "must not exceed clip_s"))
        if self.short_window > self.long_window:
            out.append(("short_window", "must not exceed long_window_s * sample_rate"))
        if self.n_fft > self.short_window:
            out.append(("n_fft", "must not exceed short_window"))
        if self.fmax > self.sample_rate / 2:
            out.append(("fmax", f"must not exceed the Nyquist frequency {self.sample_rate / 2}"))
        if self.fmin >= self.fmax:
            out.append(("fmin", "must be below fmax"))
        if self.long_hop < 1:
            out.append(("long_hop_s", "is shorter than one sample"))
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """Fractions of recordings per split; grouped by site, stratified by class."""

    train: float = num(gt=0, lt=1)
    val: float = num(gt=0, lt=1)
    test: float = num(gt=0, lt=1)
    seed: int = num(ge=0)

    def problems(self) -> list[tuple[str, str]]:
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            return [("train", f"train + val + test must be 1, got {total:g}")]
        return []


@dataclass(frozen=True, kw_only=True)
class QualityConfig:
    """`build.quality`: signal checks of every recording's channels (leakpipe/audio/quality.py)."""

    clip_fraction: float = num(ge=0, le=1)
    dc_offset_max: float = num(ge=0, le=1)
    reject: tuple[Literal["clipped", "dc_offset", "dead"], ...]


@dataclass(frozen=True, kw_only=True)
class BuildConfig(FeatureConfig):
    """`build`: recordings -> two-stage-segmented log-mel HDF5, one file per split.

    The feature keys (sample_rate ... log_floor, inherited from ``FeatureConfig``) sit flat in
    this section, so `dvc exp run -S build.n_mels=32` changes them; ``features`` extracts them.
    """

    source: str
    on_error: Literal["fail", "skip"]
    workers: int = num(ge=0)
    classes: tuple[str, ...]
    group_by: Literal["stem", "file", "folder"]
    clips_per_recording: int | Literal["all"] = num(ge=1)
    min_clip_fraction: float = num(gt=0, le=1)
    dtype: Literal["float16", "float32"]
    store_waveform: bool
    chunk_mb: float = num(gt=0)
    quality: QualityConfig
    split: SplitConfig

    @property
    def features(self) -> FeatureConfig:
        names = [f.name for f in dataclasses.fields(FeatureConfig)]
        return FeatureConfig(**{n: getattr(self, n) for n in names})

    def problems(self) -> list[tuple[str, str]]:
        out = super().problems()
        if "LEAK" not in self.classes and self.classes:
            out.append(("classes", "must contain LEAK when given"))
        return out


@dataclass(frozen=True, kw_only=True)
class ValidateConfig:
    """`validate`: bounds of the checks run on the HDF5 splits before training."""

    value_min: float
    value_max: float
    constant_tol: float = num(ge=0)
    required_classes: tuple[str, ...]
    min_files_per_class: int = num(ge=1)
    min_recordings_per_class: int = num(ge=1)
    class_fraction_min: float = num(ge=0, le=1)
    class_fraction_max: float = num(gt=0, le=1)
    workers: int = num(ge=0)
    read_mb: float = num(gt=0)
    max_listed: int = num(ge=1)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if self.value_min >= self.value_max:
            out.append(("value_min", "must be below value_max"))
        if self.class_fraction_min > self.class_fraction_max:
            out.append(("class_fraction_min", "must not exceed class_fraction_max"))
        if len(set(self.required_classes)) != len(self.required_classes):
            out.append(("required_classes", "must not repeat a class"))
        return out


@dataclass(frozen=True, kw_only=True)
class PreloadConfig:
    """`preload`: the memory plan that decides where training keeps its data."""

    mode: Literal["auto", "device", "ram", "stream"]
    dtype: Literal["float16", "float32"]
    max_batch_size: int = num(ge=1)
    safety: float = num(gt=0, le=1)
    host_reserve_mb: float = num(ge=0)
    device_reserve_mb: float = num(ge=0)
    stream_buffer_mb: float = num(gt=0)


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
    """`train`: optimisation, loss, precision, validation decision rule, checkpoints."""

    seed: int = num(ge=0)
    device: Literal["auto", "cpu", "cuda"]
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
    amp: Literal["auto", "off", "fp16", "bf16"]
    channels_last: bool
    compile: bool
    compile_mode: Literal["default", "reduce-overhead", "max-autotune",
                          "max-autotune-no-cudagraphs"]
    loss: Literal["ce", "focal"]
    focal_gamma: float = num(ge=0)
    focal_alpha: float = num(ge=0, le=1)
    leak_weight_boost: float = num(gt=0)
    leak_aux_weight: float = num(ge=0)
    leak_oversample_factor: int = num(ge=1)
    prob_mode: Literal["softmax", "aux", "blend"]
    decision_rule: Literal["long_vote", "frac_vote", "mean", "any_long"]
    segment_threshold: float = num(gt=0, lt=1)
    vote_fraction: float = num(gt=0, le=1)
    threshold_min: float = num(gt=0, lt=1)
    threshold_max: float = num(gt=0, lt=1)
    threshold_step: float = num(gt=0, lt=1)
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
        if self.threshold_min > self.threshold_max:
            out.append(("threshold_min", "must not exceed threshold_max"))
        if self.eta_min > self.learning_rate:
            out.append(("eta_min", "must not exceed learning_rate"))
        if self.warmup_epochs > self.epochs:
            out.append(("warmup_epochs", "must not exceed epochs"))
        if self.prob_mode == "aux" and self.leak_aux_weight == 0:
            out.append(("prob_mode", "'aux' needs leak_aux_weight > 0 (the aux head is untrained)"))
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


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig:
    """`evaluate`: file-level decision, threshold chosen on val only, test metrics, bootstrap."""

    prob_mode: Literal["softmax", "aux", "blend"]
    rule: Literal["long_vote", "frac_vote", "mean", "any_long"]
    vote_fraction: float = num(gt=0, le=1)
    select_rule: bool
    criterion: Literal["max_f1", "target_sensitivity", "target_specificity"]
    target: float = num(gt=0, le=1)
    threshold_min: float = num(gt=0, lt=1)
    threshold_max: float = num(gt=0, lt=1)
    threshold_step: float = num(gt=0, lt=1)
    segment_threshold: float = num(gt=0, lt=1)
    bootstrap_resamples: int = num(ge=0)
    confidence: float = num(gt=0, lt=1)
    seed: int = num(ge=0)
    device: Literal["auto", "cpu", "cuda"]
    amp: Literal["auto", "off", "fp16", "bf16"]
    max_batch_segments: int = num(ge=1)
    cpu_max_batch_segments: int = num(ge=1)

    def problems(self) -> list[tuple[str, str]]:
        if self.threshold_min > self.threshold_max:
            return [("threshold_min", "must not exceed threshold_max")]
        return []


def _grid_problems(grid: Any) -> list[tuple[str, str]]:
    """Every hyper-parameter list of a baseline grid is non-empty and positive (None allowed)."""
    out = []
    for f in dataclasses.fields(grid):
        values = getattr(grid, f.name)
        if not values:
            out.append((f.name, "must list at least one value"))
        elif any(v is not None and v <= 0 for v in values):
            out.append((f.name, f"values must be > 0, got {list(values)}"))
    return out


@dataclass(frozen=True, kw_only=True)
class RandomForestGrid:
    """`baselines.random_forest`: values tried on val for scikit-learn's random forest."""

    n_estimators: tuple[int, ...]
    max_depth: tuple[int | None, ...]
    min_samples_leaf: tuple[int, ...]

    def problems(self) -> list[tuple[str, str]]:
        return _grid_problems(self)


@dataclass(frozen=True, kw_only=True)
class SvmGrid:
    """`baselines.svm`: values tried on val for the RBF support vector machine."""

    C: tuple[float, ...]
    gamma: tuple[float, ...]

    def problems(self) -> list[tuple[str, str]]:
        return _grid_problems(self)


@dataclass(frozen=True, kw_only=True)
class XgboostGrid:
    """`baselines.xgboost`: values tried on val for XGBoost's gradient-boosted trees."""

    n_estimators: tuple[int, ...]
    max_depth: tuple[int, ...]
    learning_rate: tuple[float, ...]

    def problems(self) -> list[tuple[str, str]]:
        return _grid_problems(self)


@dataclass(frozen=True, kw_only=True)
class LogregGrid:
    """`baselines.level_logreg`: values tried on val for the level-only logistic regression."""

    C: tuple[float, ...]

    def problems(self) -> list[tuple[str, str]]:
        return _grid_problems(self)


@dataclass(frozen=True, kw_only=True)
class BaselinesConfig:
    """`baselines`: the paper's MFCC baselines and a level-only control (docs/baselines.md).

    The operating point and bootstrap follow the `evaluate` section, so the comparison with the
    CNN uses one criterion, one threshold grid and the same recording resamples.
    """

    models: tuple[Literal["random_forest", "svm", "xgboost", "level_logreg"], ...]
    n_mfcc: int = num(ge=1)
    summary: Literal["mean", "mean_std"]
    seed: int = num(ge=0)
    threads: int = num(ge=1)
    random_forest: RandomForestGrid
    svm: SvmGrid
    xgboost: XgboostGrid
    level_logreg: LogregGrid

    def problems(self) -> list[tuple[str, str]]:
        if not self.models or len(set(self.models)) != len(self.models):
            return [("models", "must list at least one model, none twice")]
        return []


# Train keys a trial never varies: the trial budget, identity and bookkeeping of a run.
TUNE_FIXED_TRAIN_KEYS = ("seed", "device", "binary", "epochs", "compile", "compile_mode",
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
    objective: Literal["val/file_f1", "val/seg_f1", "val/loss"]
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


SECTIONS: dict[str, type] = {
    "synth": SynthConfig,
    "build": BuildConfig,
    "validate": ValidateConfig,
    "preload": PreloadConfig,
    "model": ModelConfig,
    "train": TrainConfig,
    "monitor": MonitorConfig,
    "evaluate": EvaluateConfig,
    "baselines": BaselinesConfig,
    "tune": TuneConfig,
}


# ---------------------------------------------------------------------------------------------
# Strict loading
# ---------------------------------------------------------------------------------------------


def read_params(path: Path | str) -> dict[str, Any]:
    """Read params.yaml as a mapping; a missing or malformed file is a ``ConfigError``."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise ConfigError(f"{path}: not valid YAML ({where})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown section; known: {sorted(SECTIONS)}")
    return raw


def load_section(path: Path | str, name: str) -> Any:
    """Load one section of a params file into its frozen dataclass."""
    raw = read_params(path)
    if name not in SECTIONS:
        raise ConfigError(f"{path}: {name}: unknown section")
    if name not in raw:
        raise ConfigError(f"{path}: {name}: section missing")
    return from_mapping(SECTIONS[name], raw[name], name, str(path))


def from_mapping(cls: type, raw: Any, prefix: str, source: str = "<params>") -> Any:
    """Build dataclass ``cls`` from ``raw``; errors name ``source`` and the dotted key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: {prefix}: expected a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{source}: {prefix}.{unknown[0]}: unknown key; known: {sorted(fields)}")
    missing = [n for n in fields if n not in raw]
    if missing:
        raise ConfigError(f"{source}: {prefix}.{missing[0]}: missing key")
    values = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}"
        values[name] = _convert(raw[name], hints[name], key, source)
        _check_bounds(values[name], f.metadata, key, source)
    obj = cls(**values)
    for sub_key, problem in getattr(obj, "problems", lambda: [])():
        raise ConfigError(f"{source}: {prefix}.{sub_key}: {problem}")
    return obj


def _convert(value: Any, hint: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)

    def bad(expected: str) -> ConfigError:
        return _Mismatch(f"{source}: {key}: expected {expected}, got {value!r}", expected)

    if dataclasses.is_dataclass(hint):
        return from_mapping(hint, value, key, source)
    if hint is Any:  # checked by the owning dataclass's problems()
        return value
    if origin is dict:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise bad("a mapping with string keys")
        return {k: _convert(v, args[1], f"{key}.{k}", source) for k, v in value.items()}
    if origin is Literal:
        if value not in args:
            raise bad(f"one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        expected = []
        for option in inner:  # the first alternative that accepts the value
            try:
                return _convert(value, option, key, source)
            except _Mismatch as exc:
                expected.append(exc.expected)
        raise bad(" or ".join(expected))
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise bad("a list")
        return tuple(_convert(v, args[0], f"{key}[{i}]", source) for i, v in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    raise TypeError(f"unsupported config type {hint!r} for {key}")


class _Mismatch(ConfigError):
    """A value of the wrong type; ``expected`` says what was wanted (unions list them all)."""

    def __init__(self, message: str, expected: str) -> None:
        super().__init__(message)
        self.expected = expected


def _check_bounds(value: Any, bounds: Mapping[str, float], key: str, source: str) -> None:
    if value is None or not bounds or isinstance(value, str):  # bounds are for the number
        return
    checks = {
        "ge": (lambda v, b: v >= b, ">="),
        "gt": (lambda v, b: v > b, ">"),
        "le": (lambda v, b: v <= b, "<="),
        "lt": (lambda v, b: v < b, "<"),
    }
    for name, bound in bounds.items():
        ok, sign = checks[name]
        if not ok(value, bound):
            raise ConfigError(f"{source}: {key}: must be {sign} {bound:g}, got {value!r}")
