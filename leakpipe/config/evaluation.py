"""Evaluation-side sections: the CNN's file-level evaluation, the promotion rule of the model
registry and the MFCC baselines with their hyper-parameter grids (`evaluate`, `promote`,
`baselines`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from leakpipe.config.fields import num

__all__ = ["DETECTOR_KINDS", "BaselinesConfig", "DetectorConfig", "EvaluateConfig",
           "LogregGrid", "LoggerStatsConfig", "PromoteConfig", "RandomForestGrid", "RulesConfig",
           "SvmGrid", "XgboostGrid"]

# The methods a detector file can be, simplest first (the order ties go by in selection):
# logger_stats (statistics), cnn (clips), fused (the two stacked on val recordings).
DETECTOR_KINDS: tuple[str, ...] = ("logger_stats", "cnn", "fused")

# A registered model's name ends up in URIs (models:/<name>@<alias>, models:/<name>/<version>):
# these characters would split it there.
MODEL_NAME_FORBIDDEN = "/@:"


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig:
    """`evaluate`: operating point chosen on val only (by `decision`), test metrics, bootstrap."""

    select_rule: bool
    criterion: Literal["max_f1", "target_sensitivity", "target_specificity"]
    target: float = num(gt=0, le=1)
    bootstrap_resamples: int = num(ge=0)
    confidence: float = num(gt=0, lt=1)
    seed: int = num(ge=0)
    max_batch_segments: int = num(ge=1)
    cpu_max_batch_segments: int = num(ge=1)
    registered_model: str    # MLflow registered model the detector joins as a version; "" = none

    def problems(self) -> list[tuple[str, str]]:
        name = self.registered_model
        if name != name.strip() or any(c in name for c in MODEL_NAME_FORBIDDEN):
            return [("registered_model", f"must not contain {' '.join(MODEL_NAME_FORBIDDEN)} "
                                         f"or surrounding spaces (it goes into models:/ URIs), "
                                         f"got {name!r}")]
        return []


@dataclass(frozen=True, kw_only=True)
class PromoteConfig:
    """`promote`: when `leakpipe promote` moves the registry alias ``champion`` to the candidate.

    The candidate is promoted iff the lower end of the paired bootstrap interval of
    F1(candidate) - F1(champion) on the test split (`evaluate`'s resamples, confidence and seed)
    is >= -``margin``: 0 asks the data to show the candidate is not worse; 0.01 tolerates a
    loss of at most one F1 point at that confidence (docs/evaluation.md#promotion).
    """

    margin: float = num(ge=0, le=1)


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
class LoggerStatsConfig:
    """`baselines.logger_stats`: whole-recording statistics + L2 logistic regression."""

    C: tuple[float, ...]                       # inverse L2 strengths tried by inner CV
    forms: Literal["all", "gain_free"]         # gain_free: spreads and relative band levels only
    inner_folds: int = num(ge=1)               # grouped folds over train + val that choose C
                                               # (1: fit on train, choose on val)
    seed: int = num(ge=0)                      # of those folds' site assignment

    def problems(self) -> list[tuple[str, str]]:
        if not self.C or any(not c > 0 for c in self.C):
            return [("C", "needs at least one value, each above 0")]
        return []


@dataclass(frozen=True, kw_only=True)
class RulesConfig:
    """`baselines.rules`: the logger's rules (min_level, band_min_level), nothing fitted but
    the threshold (docs/baselines.md)."""

    percentile: float = num(gt=0, lt=100)      # the low percentile of the frame level read
                                               # (one of build.stats.percentiles)


@dataclass(frozen=True, kw_only=True)
class DetectorConfig:
    """`detector`: which method the shipped detector is, and how grouped CV picks it."""

    # auto, or a detector kind's name (leakpipe.detectors.registry: the built-in logger_stats,
    # cnn, fused, or a registered one); ship refuses a name no kind has
    method: str
    selection_margin: float = num(ge=0, le=1)  # a more complex kind must beat a simpler one
                                               # by more than this pooled recording ROC-AUC
    fusion_C: float = num(gt=0)                # inverse L2 strength of the fused stacker


@dataclass(frozen=True, kw_only=True)
class BaselinesConfig:
    """`baselines`: the paper's MFCC baselines and a level-only control (docs/baselines.md).

    The operating point and bootstrap follow the `evaluate` section, so the comparison with the
    CNN uses one criterion, one threshold grid and the same recording resamples.
    """

    models: tuple[Literal["random_forest", "svm", "xgboost", "level_logreg", "logger_stats",
                          "min_level", "band_min_level"], ...]
    n_mfcc: int = num(ge=1)
    summary: Literal["mean", "mean_std"]
    seed: int = num(ge=0)
    threads: int = num(ge=1)
    random_forest: RandomForestGrid
    svm: SvmGrid
    xgboost: XgboostGrid
    level_logreg: LogregGrid
    logger_stats: LoggerStatsConfig
    rules: RulesConfig

    def problems(self) -> list[tuple[str, str]]:
        if not self.models or len(set(self.models)) != len(self.models):
            return [("models", "must list at least one model, none twice")]
        return []
