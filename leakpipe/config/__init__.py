"""Typed, frozen configuration: one dataclass per params.yaml section, loaded strictly.

Every key in params.yaml maps to exactly one field here. Loading rejects unknown keys, missing
keys, wrong types, non-finite floats and out-of-range values with a one-line ``ConfigError``
naming the file and the dotted key. Variants are made with ``dataclasses.replace``; nothing
mutates a loaded config.

Package layout (import from ``leakpipe.config``; the submodules are an implementation detail):

- ``fields``: ``num``, a numeric dataclass field whose bounds (``ge``, ``gt``, ``le``, ``lt``)
  ride in the field metadata; ``num(finite=False)`` is the only way a float may be .inf / .nan.
- ``data``: `synth`, `field`, `build` (with ``FeatureConfig``, ``SplitConfig``, ``QualityConfig``),
  `validate`, `preload`.
- ``training``: `model`, `train` (with ``AugmentConfig`` and the input norms), `monitor`.
- ``evaluation``: `evaluate`, `promote` (the model registry's promotion rule), `baselines` and
  the baselines' hyper-parameter grids.
- ``shared``: `runtime` and `decision`, the sections several stages read, and the rules
  across sections.
- ``adaptation``: `adapt` (field adaptation by pseudo-labelling rounds).
- ``crossval``: `cv` (grouped cross-validation of the CNN and the baselines).
- ``tuning``: `tune`, its search space (``TuneSpace``, ``ParamSpec``) and the TUNE_* constants.
- ``sections``: ``SECTIONS``, the section name -> dataclass table.
- ``loading``: ``read_params`` (UTF-8 only, duplicate keys and unknown sections refused),
  ``load_section``, ``from_mapping``: strict conversion, finiteness and bounds checks.

Imports run one way, so there is no cycle: fields <- data, training, evaluation;
training <- tuning; all section modules <- sections <- loading <- this package.
"""

from __future__ import annotations

from leakpipe.config.adaptation import AdaptConfig
from leakpipe.config.crossval import CV_METHODS, CrossvalConfig
from leakpipe.config.data import (
    BuildConfig,
    FeatureConfig,
    FieldConfig,
    PreloadConfig,
    QualityConfig,
    RecordingStatsConfig,
    SplitConfig,
    SynthConfig,
    ValidateConfig,
)
from leakpipe.config.evaluation import (
    DETECTOR_KINDS,
    BaselinesConfig,
    DetectorConfig,
    EvaluateConfig,
    LoggerStatsConfig,
    LogregGrid,
    PromoteConfig,
    RandomForestGrid,
    RulesConfig,
    SvmGrid,
    XgboostGrid,
)
from leakpipe.config.fields import num
from leakpipe.config.loading import from_mapping, load_section, read_params, stored_features
from leakpipe.config.sections import SECTIONS
from leakpipe.config.shared import DecisionConfig, RuntimeConfig, check_aux_head
from leakpipe.config.training import (
    INPUT_NORMS,
    MODEL_WIDTHS,
    AugmentConfig,
    InputNorm,
    ModelConfig,
    MonitorConfig,
    TrainConfig,
)
from leakpipe.config.tuning import (
    TUNE_CHOICE_TYPES,
    TUNE_FIXED_TRAIN_KEYS,
    ParamSpec,
    TuneConfig,
    TuneSpace,
)
from leakpipe.errors import ConfigError

__all__ = [
    "AdaptConfig",
    "CV_METHODS",
    "CrossvalConfig",
    "check_aux_head",
    "DecisionConfig",
    "RuntimeConfig",
    # loading
    "ConfigError",
    "SECTIONS",
    "from_mapping",
    "load_section",
    "read_params",
    "stored_features",
    # fields
    "num",
    # data
    "BuildConfig",
    "FeatureConfig",
    "FieldConfig",
    "PreloadConfig",
    "QualityConfig",
    "RecordingStatsConfig",
    "SplitConfig",
    "SynthConfig",
    "ValidateConfig",
    # training
    "INPUT_NORMS",
    "MODEL_WIDTHS",
    "AugmentConfig",
    "InputNorm",
    "ModelConfig",
    "MonitorConfig",
    "TrainConfig",
    # evaluation
    "DETECTOR_KINDS",
    "BaselinesConfig",
    "DetectorConfig",
    "EvaluateConfig",
    "LoggerStatsConfig",
    "LogregGrid",
    "PromoteConfig",
    "RandomForestGrid",
    "RulesConfig",
    "SvmGrid",
    "XgboostGrid",
    # tuning
    "TUNE_CHOICE_TYPES",
    "TUNE_FIXED_TRAIN_KEYS",
    "ParamSpec",
    "TuneConfig",
    "TuneSpace",
]
