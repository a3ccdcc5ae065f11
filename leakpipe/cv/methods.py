"""One fold's methods: the CNN (train's ``fit()``, evaluate's rules) and the baselines.

Every method sees the fold's three files in the same roles: it learns on train, chooses what it
chooses (the CNN's best epoch, every threshold, the baselines' hyper-parameters) on val, and is
then applied unchanged to test. The test file is opened by a method only after its choices are
made, and its labels never reach a choice (tests/test_cv.py flips them to check).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.baselines.comparison import fit_and_select, model_inputs
from leakpipe.baselines.data import ClipFeatures, read_features
from leakpipe.baselines.models import leak_scores
from leakpipe.config import (
    BaselinesConfig,
    CrossvalConfig,
    DecisionConfig,
    EvaluateConfig,
    ModelConfig,
    PreloadConfig,
    RuntimeConfig,
    TrainConfig,
)
from leakpipe.config.crossval import CNN_METHOD
from leakpipe.decision.voting import decide
from leakpipe.detector import Network
from leakpipe.evaluate.detector_evaluation import evaluate_detector
from leakpipe.runtime import make_runtime
from leakpipe.tracking import NullTracker
from leakpipe.train.fit import FitOptions, fit
from leakpipe.train.inputs import prepare_training
from leakpipe.train.subsample import Subsample

log = logging.getLogger(__name__)

TRAIN, VAL, TEST = "train", "val", "test"
HISTORY_KEYS = ("epoch", "train/loss", "train/accuracy", "val/loss", "val/file_f1",
                "val/file_roc_auc")


@dataclass(frozen=True)
class Settings:
    """Every section a fold's methods read."""

    cv: CrossvalConfig
    model: ModelConfig
    train: TrainConfig
    runtime: RuntimeConfig
    decision: DecisionConfig
    evaluate: EvaluateConfig
    baselines: BaselinesConfig
    preload: PreloadConfig           # used only to plan when no preload plan is given
    plan: Mapping[str, Any]          # the preload plan: placement and memory margins

    def to_dict(self) -> dict[str, Any]:
        """The settings a finished fold depends on (a resumed run must match them)."""
        return {name: dataclasses.asdict(getattr(self, name)) for name in
                ("cv", "model", "train", "runtime", "decision", "evaluate", "baselines")}


@dataclass(frozen=True)
class MethodResult:
    """One method on one fold's test file, in file order."""

    name: str
    threshold: float
    scores: np.ndarray               # (F,) float
    decision: np.ndarray             # (F,) bool
    info: dict[str, Any]             # chosen hyper-parameters, best epoch, val curve, ...

    def to_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "scores": self.scores.tolist(),
                "decision": self.decision.astype(int).tolist(), "info": self.info}


def run_cnn(paths: Mapping[str, Path], settings: Settings, checkpoint_dir: Path, *,
            progress: bool = False) -> MethodResult:
    """fit() on the fold's train with early stopping on its val; evaluate's point on val."""
    cv = settings.cv
    train_cfg = dataclasses.replace(settings.train, epochs=cv.epochs)
    rt = settings.runtime
    runtime = make_runtime(rt.device, rt.amp, rt.channels_last)
    data = prepare_training(paths[TRAIN], paths[VAL], dict(settings.plan), train_cfg,
                            runtime.device)
    try:
        source = (data.train_source if cv.train_fraction >= 1.0
                  else Subsample(data.train_source, cv.train_fraction))
        result = fit(settings.model, train_cfg, runtime=runtime, decision=settings.decision,
                     train_source=source, val=data.val, class_counts=data.class_counts,
                     tracker=NullTracker(), checkpoint_dir=checkpoint_dir,
                     features=data.features.to_dict(), options=FitOptions(progress=progress))
    finally:
        data.close()
    network = Network(model=result.model, model_cfg=settings.model,
                      class_names=data.class_names, data_class_names=data.data_class_names,
                      binary=train_cfg.binary, features=data.features,
                      input_norm=train_cfg.input_norm)
    ev = dataclasses.replace(settings.evaluate, bootstrap_resamples=0)
    evaluation = evaluate_detector(network, {VAL: paths[VAL], TEST: paths[TEST]},
                                   settings.plan, ev, settings.decision, runtime)
    history = [{k: float(h[k]) for k in HISTORY_KEYS if k in h} for h in result.history]
    info = {"best_epoch": result.best_epoch, "stop_reason": result.stop_reason,
            "rule": evaluation.point.rule, "val_criterion": float(evaluation.point.value),
            "history": history}
    test = evaluation.test
    return MethodResult(CNN_METHOD, float(evaluation.point.threshold),
                        np.asarray(test.file_score, dtype=np.float64),
                        np.asarray(test.decision, dtype=bool), info)


def run_baselines(paths: Mapping[str, Path], settings: Settings,
                  names: tuple[str, ...]) -> list[MethodResult]:
    """Each baseline fitted on train, its hyper-parameters and threshold chosen on val."""
    if not names:
        return []
    cfg = settings.baselines
    train, val = (read_features(paths[r], cfg.n_mfcc, cfg.summary) for r in (TRAIN, VAL))
    chosen = {name: fit_and_select(name, train, val, cfg, settings.evaluate, settings.decision)
              for name in names}
    test = read_features(paths[TEST], cfg.n_mfcc, cfg.summary)   # after every choice
    return [_apply(name, model, hyper, point, test)
            for name, (model, hyper, point, _) in chosen.items()]


def _apply(name: str, model: Any, hyper: dict[str, Any], point: Any,
           test: ClipFeatures) -> MethodResult:
    scores = np.asarray(leak_scores(model, model_inputs(test, name)), dtype=np.float64)
    return MethodResult(name, float(point.threshold), scores, decide(scores, point.threshold)[0],
                        {"hyper": _plain(hyper), "val_criterion": float(point.value)})


def _plain(hyper: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in hyper.items()}


def run_fold_methods(paths: Mapping[str, Path], settings: Settings, work: Path, *,
                     progress: bool = False) -> list[MethodResult]:
    """Every method of ``cv.methods`` on one fold, the CNN's checkpoints under ``work``."""
    results = []
    if CNN_METHOD in settings.cv.methods:
        work.mkdir(parents=True, exist_ok=True)
        results.append(run_cnn(paths, settings, work, progress=progress))
    baselines = tuple(m for m in settings.cv.methods if m != CNN_METHOD)
    results.extend(run_baselines(paths, settings, baselines))
    return results


__all__ = ["MethodResult", "Settings", "run_cnn", "run_baselines", "run_fold_methods"]
