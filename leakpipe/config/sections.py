"""The table of params.yaml sections: section name -> its frozen dataclass.

Kept apart from the section modules and from ``leakpipe.config.loading`` so that neither
imports the other: this module imports every section module, the loader imports this one.
"""

from __future__ import annotations

from leakpipe.config.adaptation import AdaptConfig
from leakpipe.config.crossval import CrossvalConfig
from leakpipe.config.data import (
    BuildConfig,
    FieldConfig,
    PreloadConfig,
    SynthConfig,
    ValidateConfig,
)
from leakpipe.config.evaluation import (
    BaselinesConfig,
    DetectorConfig,
    EvaluateConfig,
    PromoteConfig,
)
from leakpipe.config.shared import DecisionConfig, RuntimeConfig
from leakpipe.config.training import ModelConfig, MonitorConfig, TrainConfig
from leakpipe.config.tuning import TuneConfig

__all__ = ["SECTIONS"]


SECTIONS: dict[str, type] = {
    "synth": SynthConfig,
    "field": FieldConfig,
    "build": BuildConfig,
    "validate": ValidateConfig,
    "preload": PreloadConfig,
    "runtime": RuntimeConfig,
    "model": ModelConfig,
    "train": TrainConfig,
    "monitor": MonitorConfig,
    "decision": DecisionConfig,
    "evaluate": EvaluateConfig,
    "promote": PromoteConfig,
    "baselines": BaselinesConfig,
    "tune": TuneConfig,
    "adapt": AdaptConfig,
    "cv": CrossvalConfig,
    "detector": DetectorConfig,
}
