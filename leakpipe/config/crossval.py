"""`cv`: grouped cross-validation of the CNN and every baseline on the same folds.

See leakpipe.cv and README "Your own recordings" for when a single split is enough and when it
is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leakpipe.config.fields import num

__all__ = ["CV_METHODS", "CrossvalConfig"]

CNN_METHOD = "cnn"
STATS_METHOD = "logger_stats"
FUSED_METHOD = "fused"
RULE_METHODS = ("min_level", "band_min_level")   # the logger's rules (baselines.rules)
CV_METHODS: tuple[str, ...] = (CNN_METHOD, STATS_METHOD, FUSED_METHOD, *RULE_METHODS,
                               "random_forest", "svm", "xgboost", "level_logreg")


@dataclass(frozen=True, kw_only=True)
class CrossvalConfig:
    """`cv`: folds over groups (sites), the inner val split, the CNN's budget per fold."""

    folds: int = num(ge=2)
    val_fraction: float = num(gt=0, lt=1)  # share of a fold's training groups held out as val
    seed: int = num(ge=0)
    methods: tuple[Literal["cnn", "logger_stats", "fused", "min_level", "band_min_level",
                           "random_forest", "svm", "xgboost", "level_logreg"], ...]
    epochs: int = num(ge=1)                 # CNN epochs per fold (train.epochs is the stage's)
    train_fraction: float = num(gt=0, le=1)  # share of the shuffled training batches per epoch
    bootstrap_resamples: int = num(ge=1)    # site resamples of the pooled intervals
    confidence: float = num(gt=0, lt=1)
    repeats: int = num(ge=1)                # draws of the site-to-fold assignment (the stage)
    source_repeats: int = num(ge=1)         # ... of `leakpipe cv --source` (a user's network)

    def problems(self) -> list[tuple[str, str]]:
        if not self.methods:
            return [("methods", "name at least one method")]
        if len(set(self.methods)) != len(self.methods):
            return [("methods", "lists a method twice")]
        if FUSED_METHOD in self.methods and not {CNN_METHOD, STATS_METHOD} <= set(self.methods):
            return [("methods", "fused stacks cnn and logger_stats: list both")]
        return []
