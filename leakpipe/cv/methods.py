"""One fold's methods: the CNN (train's ``fit()``, evaluate's rules), logger_stats (the
recordings' level statistics), fused (the two stacked on val), the logger's rules (min_level,
band_min_level: nothing fitted but the threshold) and the baselines.

Every method sees the fold's three files in the same roles: it learns on train, chooses what it
chooses (the CNN's best epoch, every threshold, the baselines' hyper-parameters) on val, and is
then applied unchanged to test. The test file is opened by a method only after its choices are
made, and its labels never reach a choice (tests/test_cv.py flips them to check).

Every method also gives one verdict per recording (``recording_level``): its clip scores
averaged over each recording, the threshold chosen on the val recordings.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.baselines import logger_stats
from leakpipe.baselines.data import ClipFeatures, read_features
from leakpipe.baselines.logger_stats import RecordingTable, read_recordings, recording_means
from leakpipe.baselines.models import leak_scores
from leakpipe.baselines.rules import fit_rule
from leakpipe.baselines.selection import fit_and_select, model_inputs
from leakpipe.config import (
    BaselinesConfig,
    CrossvalConfig,
    DecisionConfig,
    DetectorConfig,
    EvaluateConfig,
    ModelConfig,
    PreloadConfig,
    RuntimeConfig,
    TrainConfig,
)
from leakpipe.config.crossval import CNN_METHOD, FUSED_METHOD, RULE_METHODS, STATS_METHOD
from leakpipe.cv.recording_level import fuse, recording_decisions, site_out_of_fold
from leakpipe.decision.voting import decide
from leakpipe.detector import Network
from leakpipe.evaluate.detector_evaluation import evaluate_detector
from leakpipe.evaluate.figures import ranking_metrics
from leakpipe.runtime import make_runtime
from leakpipe.tracking import NullTracker
from leakpipe.train.fit import FitOptions, fit
from leakpipe.train.inputs import prepare_training
from leakpipe.train.subsample import Subsample

log = logging.getLogger(__name__)

TRAIN, VAL, TEST = "train", "val", "test"
HISTORY_KEYS = ("epoch", "train/loss", "train/accuracy", "val/loss", "val/clip_f1",
                "val/clip_roc_auc")


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
    detector: DetectorConfig
    preload: PreloadConfig           # used only to plan when no preload plan is given
    plan: Mapping[str, Any]          # the preload plan: placement and memory margins

    def to_dict(self) -> dict[str, Any]:
        """The settings a finished fold depends on (a resumed run must match them): not the
        number of draws (draw d's folds are the same whatever the number after it)."""
        out = {name: dataclasses.asdict(getattr(self, name)) for name in
               ("cv", "model", "train", "runtime", "decision", "evaluate", "baselines",
                "detector")}
        for key in ("repeats", "source_repeats"):
            out["cv"].pop(key)
        return out


@dataclass(frozen=True)
class MethodResult:
    """One method on one fold's test file, in file order."""

    name: str
    threshold: float
    scores: np.ndarray               # (F,) float
    decision: np.ndarray             # (F,) bool
    info: dict[str, Any]             # chosen hyper-parameters, best epoch, val curve, ...
    val_scores: np.ndarray | None = None      # (F_val,) the val clips' scores, in file order
    recording: dict[str, Any] | None = None   # recording_level.recording_decisions
    span: tuple[float, float] | None = None   # time.time() when its work began and ended

    def to_dict(self) -> dict[str, Any]:
        out = {"threshold": self.threshold, "scores": self.scores.tolist(),
               "decision": self.decision.astype(int).tolist(), "info": self.info}
        if self.span is not None:
            out["span"] = list(self.span)
        return {**out, "recording": self.recording} if self.recording is not None else out


def timed(run: Callable[[], MethodResult]) -> MethodResult:
    """``run()`` with the wall-clock span of its work (the fold's MLflow child run shows it)."""
    start = time.time()
    result = run()
    return dataclasses.replace(result, span=(start, time.time()))


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
                        np.asarray(test.decision, dtype=bool), info,
                        val_scores=np.asarray(evaluation.val.file_score, dtype=np.float64))


def run_baselines(paths: Mapping[str, Path], settings: Settings,
                  names: tuple[str, ...]) -> list[MethodResult]:
    """Each baseline fitted on train, its hyper-parameters and threshold chosen on val."""
    if not names:
        return []
    cfg = settings.baselines
    train, val = (read_features(paths[r], cfg.n_mfcc, cfg.summary) for r in (TRAIN, VAL))
    chosen, began = {}, {}
    for name in names:
        began[name] = time.time()
        chosen[name] = fit_and_select(name, train, val, cfg, settings.evaluate,
                                      settings.decision)
    test = read_features(paths[TEST], cfg.n_mfcc, cfg.summary)   # after every choice
    out = []
    for name, (model, hyper, point, _) in chosen.items():
        fitted = time.time() - began[name]   # its fit and choice (the shared reads: not)
        start = time.time()
        result = _apply(name, model, hyper, point, val, test)
        out.append(dataclasses.replace(result, span=(began[name],
                                                     began[name] + fitted + time.time() - start)))
    return out


def _apply(name: str, model: Any, hyper: dict[str, Any], point: Any, val: ClipFeatures,
           test: ClipFeatures) -> MethodResult:
    scores = np.asarray(leak_scores(model, model_inputs(test, name)), dtype=np.float64)
    val_scores = np.asarray(leak_scores(model, model_inputs(val, name)), dtype=np.float64)
    return MethodResult(name, float(point.threshold), scores, decide(scores, point.threshold)[0],
                        {"hyper": _plain(hyper), "val_criterion": float(point.value)},
                        val_scores=val_scores)


def run_logger_stats(tables: Mapping[str, RecordingTable], settings: Settings) -> MethodResult:
    """The statistics model: ``C`` by grouped inner CV over train + val, refitted on them, its
    threshold on their out-of-fold scores (``logger_stats.fit_and_select``: a val of a few
    recordings alone cannot place it); each test clip carries its recording's score."""
    fit_ = logger_stats.fit_and_select(tables[TRAIN], tables[VAL], settings.baselines.logger_stats,
                                       settings.evaluate, settings.decision)
    val, test = tables[VAL], tables[TEST]
    scores = logger_stats.leak_probability(fit_.net, test.stats[:, fit_.used])   # (R_test,)
    clip = scores[test.clip_recording]
    recording = recording_decisions(fit_.pooled_scores, fit_.pooled_truth, scores,
                                    settings.evaluate, settings.decision)
    # what nested selection compares (recording_level.nested_choices): the ROC-AUC of its
    # out-of-fold scores over train + val, its most precise honest inner figure (a val of a
    # handful of recordings alone makes the choice a coin toss); the CNN's is its val figure
    recording.update(val_scores=fit_.val_scores.tolist(),
                     val_roc_auc=float(ranking_metrics(fit_.pooled_truth,
                                                       fit_.pooled_scores)["roc_auc"]))
    info = {"hyper": {"C": fit_.c, "forms": settings.baselines.logger_stats.forms},
            "val_criterion": float(fit_.point.value), "statistics": len(fit_.used)}
    return MethodResult(STATS_METHOD, float(fit_.point.threshold), clip,
                        decide(clip, fit_.point.threshold)[0], info,
                        val_scores=fit_.val_scores[val.clip_recording], recording=recording)


def run_rules(tables: Mapping[str, RecordingTable], settings: Settings,
              names: tuple[str, ...]) -> list[MethodResult]:
    """The logger's rules (``baselines.rules``): each rule's statistic and threshold from the
    train and val recordings alone (the band from train), then the test recordings scored
    once; each test clip carries its recording's score."""
    out = []
    val, test = tables[VAL], tables[TEST]
    for name in names:
        began = time.time()
        fit = fit_rule(name, tables[TRAIN], val, settings.baselines.rules.percentile,
                       settings.evaluate, settings.decision)
        scores = fit.scores(test)                                    # (R_test,) after the fit
        recording = recording_decisions(fit.pooled_scores, fit.pooled_truth, scores,
                                        settings.evaluate, settings.decision)
        # nested selection's inner figure (RuleFit.inner_roc_auc: no threshold enters it)
        recording.update(val_scores=fit.scores(val).tolist(), val_roc_auc=fit.inner_roc_auc())
        threshold = float(recording["threshold"])
        clip = scores[test.clip_recording]
        out.append(MethodResult(
            name, threshold, clip, decide(clip, threshold)[0],
            {"statistic": fit.statistic, "centre_db": fit.centre_db, "width_db": fit.width_db,
             "val_criterion": float(fit.point.value)},
            val_scores=fit.scores(val)[val.clip_recording], recording=recording,
            span=(began, time.time())))
    return out


def run_fused(cnn: MethodResult, stats: MethodResult, tables: Mapping[str, RecordingTable],
              settings: Settings) -> MethodResult:
    """The CNN's and logger_stats' recording probabilities stacked on the val recordings."""
    val, test = tables[VAL], tables[TEST]
    parts = [(_means(m.val_scores, val), _means(m.scores, test)) for m in (cnn, stats)]
    val_scores, test_scores, weights = fuse([p[0] for p in parts], val.truth,
                                            [p[1] for p in parts], settings.detector.fusion_C)
    point = recording_decisions(val_scores, val.truth, test_scores, settings.evaluate,
                                settings.decision)
    # the stacker is fitted on val, so its val figure would flatter it in nested selection:
    # that reads the ROC-AUC of val scores each from a stacker fitted without its site
    held_out = site_out_of_fold([p[0] for p in parts], val.truth, val.group,
                                settings.detector.fusion_C)
    point["val_roc_auc"] = float(ranking_metrics(val.truth, held_out)["roc_auc"])
    clip = test_scores[test.clip_recording]
    threshold = float(point["threshold"])
    return MethodResult(FUSED_METHOD, threshold, clip, decide(clip, threshold)[0],
                        {"weights": dict(zip(("cnn", "logger_stats", "bias"), weights,
                                             strict=True))},
                        val_scores=val_scores[val.clip_recording])


def _means(clip_scores: np.ndarray | None, table: RecordingTable) -> np.ndarray:
    assert clip_scores is not None
    return recording_means(np.asarray(clip_scores, np.float64), table.clip_recording,
                           len(table))


def with_recordings(result: MethodResult, tables: Mapping[str, RecordingTable],
                    settings: Settings) -> MethodResult:
    """The method's recording verdicts: clip scores averaged per recording, the threshold
    chosen on the val recordings (a method that already decided per recording keeps its own)."""
    if result.recording is not None:
        return result
    val, test = tables[VAL], tables[TEST]
    recording = recording_decisions(_means(result.val_scores, val), val.truth,
                                    _means(result.scores, test), settings.evaluate,
                                    settings.decision)
    return dataclasses.replace(result, recording=recording)


def _plain(hyper: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in hyper.items()}


def run_fold_methods(paths: Mapping[str, Path], settings: Settings, work: Path, *,
                     progress: bool = False) -> list[MethodResult]:
    """Every method of ``cv.methods`` on one fold, the CNN's checkpoints under ``work``; each
    with its recording verdicts."""
    methods = settings.cv.methods
    tables = {role: read_recordings(paths[role]) for role in (TRAIN, VAL, TEST)}
    results = []
    if CNN_METHOD in methods:
        work.mkdir(parents=True, exist_ok=True)
        results.append(timed(lambda: run_cnn(paths, settings, work, progress=progress)))
    if STATS_METHOD in methods:
        results.append(timed(lambda: run_logger_stats(tables, settings)))
    if FUSED_METHOD in methods:
        by_name = {r.name: r for r in results}
        results.append(timed(lambda: run_fused(by_name[CNN_METHOD], by_name[STATS_METHOD],
                                                tables, settings)))
    results.extend(run_rules(tables, settings, tuple(m for m in methods if m in RULE_METHODS)))
    baselines = tuple(m for m in methods
                      if m not in (CNN_METHOD, STATS_METHOD, FUSED_METHOD, *RULE_METHODS))
    results.extend(run_baselines(paths, settings, baselines))
    return [with_recordings(r, tables, settings) for r in results]


__all__ = ["MethodResult", "Settings", "run_baselines", "run_cnn", "run_fold_methods",
           "run_fused", "run_logger_stats", "run_rules", "timed", "with_recordings"]
