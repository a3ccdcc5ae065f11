"""The baseline classifiers, their hyper-parameter grids and their leak scores.

Every model is a scikit-learn pipeline ``StandardScaler -> classifier`` (the scaler is fitted
on train only) whose leak score is a probability in [0, 1], so evaluate's threshold grid
applies unchanged:

- ``random_forest``: ``RandomForestClassifier``, the share of trees voting LEAK;
- ``svm``: RBF ``SVC`` whose decision value is mapped to a probability by a sigmoid fitted on
  5 stratified train folds (``CalibratedClassifierCV(..., ensemble=False)``);
- ``xgboost``: ``xgboost.XGBClassifier`` (hist trees, log loss);
- ``level_logreg``: ``LogisticRegression`` on the clip level alone (one feature).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import ParameterGrid
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from leakpipe.config import BaselinesConfig

MODEL_NAMES: tuple[str, ...] = ("random_forest", "svm", "xgboost", "level_logreg")
MFCC, LEVEL, STATS = "mfcc", "level", "stats"
FEATURE_SET = {"random_forest": MFCC, "svm": MFCC, "xgboost": MFCC, "level_logreg": LEVEL,
               "logger_stats": STATS,   # logger_stats: leakpipe.baselines.logger_stats
               "min_level": STATS, "band_min_level": STATS}   # the rules: baselines.rules
CALIBRATION_FOLDS = 5
LEAK = 1  # the positive label of the binary task


def hyper_grid(cfg: BaselinesConfig, name: str) -> list[dict[str, Any]]:
    """Every combination of the model's params lists, in a fixed order."""
    return list(ParameterGrid(dataclasses.asdict(getattr(cfg, name))))


def _classifier(name: str, hyper: dict[str, Any], seed: int, threads: int) -> ClassifierMixin:
    if name == "random_forest":
        return RandomForestClassifier(**hyper, random_state=seed, n_jobs=threads)
    if name == "svm":
        return CalibratedClassifierCV(SVC(kernel="rbf", **hyper), method="sigmoid",
                                      cv=CALIBRATION_FOLDS, ensemble=False)
    if name == "xgboost":
        from xgboost import XGBClassifier

        return XGBClassifier(**hyper, tree_method="hist", objective="binary:logistic",
                             random_state=seed, n_jobs=threads)
    if name == "level_logreg":
        return LogisticRegression(**hyper)
    raise ValueError(f"model must be one of {MODEL_NAMES}, got {name!r}")


def make_model(name: str, hyper: dict[str, Any], seed: int, threads: int) -> Pipeline:
    """An unfitted ``StandardScaler -> classifier`` pipeline."""
    return make_pipeline(StandardScaler(), _classifier(name, hyper, seed, threads))


def leak_scores(model: Pipeline, x: np.ndarray) -> np.ndarray:
    """(F, D) features -> (F,) probability of LEAK from a fitted pipeline."""
    column = list(model.classes_).index(LEAK)
    return model.predict_proba(x)[:, column].astype(np.float64)
