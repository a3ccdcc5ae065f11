"""The train stage: preload plan -> batch sources -> ``fit()`` -> detector, metrics, plots, run.

``run_train`` is what `leakpipe train` (and stages/train.py, also under torchrun) calls:

1. SIGINT / SIGTERM become a stop flag (``GracefulStop``); torchrun's env starts DDP.
2. The splits are checked against the validation stamp (``leakpipe.data.stamp``: the bytes
   `validate` passed, or ``--unvalidated``, tagged); the preload plan is re-checked against
   this machine (``prepare_training``).
3. One MLflow run (rank 0), from the stage's start: every param flattened (model, train,
   monitor, the placement), a metrics row per epoch (``fit``), the step-time / system profile
   (``leakpipe.monitor``, switched on by the ``monitor`` params) and MLflow's own system
   metrics. The best epoch is a paragraph of the run's description and a table
   (train/best_epoch.json), not one-point metrics, so the run's charts are its curves.
4. ``fit`` resumes an unfinished run from the checkpoint folder (a finished one is cleared).
5. Rank 0 writes models/model.pt (the best epoch's network; evaluate chooses the operating
   point and writes the detector), metrics/train.json, the per-epoch plot data and logs the
   confusion matrices and the network (a pyfunc segment scorer) to MLflow.

A stop request ends with exit code 128 + signal after the checkpoint is written and the MLflow
run is closed as KILLED; re-running the stage (``dvc repro``) resumes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import leakpipe
from leakpipe import tracking
from leakpipe.config import (
    DecisionConfig,
    ModelConfig,
    MonitorConfig,
    RuntimeConfig,
    TrainConfig,
    check_aux_head,
    load_section,
)
from leakpipe.data.schema import leak_index
from leakpipe.data.stamp import trust_splits
from leakpipe.files import write_json_atomic, write_text_atomic
from leakpipe.model import SegmentScorer
from leakpipe.monitor import TrainMonitor, write_profile
from leakpipe.preload.plan import read_plan
from leakpipe.runtime import Runtime, make_runtime
from leakpipe.tracking import NullTracker, Tracker
from leakpipe.train import checkpoint as ckpt_io
from leakpipe.train import distributed
from leakpipe.train.distributed import Distributed
from leakpipe.train.fit import FitOptions, FitResult, fit
from leakpipe.train.inputs import TrainingData, prepare_training
from leakpipe.train.interrupt import GracefulStop, StopRequested
from leakpipe.train.loop import charted_metrics
from leakpipe.train.outputs import (
    confusion_figure,
    history_csv,
    input_example,
    metrics_summary,
    save_model,
)
from leakpipe.train.resume import resume_point

log = logging.getLogger(__name__)

STAGE = "train"
TAG_RESUMED_FROM = "leakpipe.resumed_from"   # the checkpoint a resumed run started from
TAG_PREVIOUS_RUN = "leakpipe.previous_run_id"  # the MLflow run of the interrupted attempt
PACKAGE_DIR = Path(leakpipe.__file__).resolve().parent   # shipped with the logged model
BEST_EPOCH_TABLE = f"{STAGE}/best_epoch.json"   # every figure of the best epoch (MLflow table)


@dataclass(frozen=True)
class TrainPaths:
    """Every path of the stage; dvc.yaml passes them on the command line."""

    train: Path
    val: Path
    plan: Path
    model: Path
    metrics: Path
    plots: Path
    checkpoints: Path
    validated: Path | None     # the validation stamp; None: --unvalidated (tagged, warned)


@dataclass(frozen=True)
class TrainSections:
    """The params sections the stage reads."""

    runtime: RuntimeConfig
    model: ModelConfig
    train: TrainConfig
    monitor: MonitorConfig
    decision: DecisionConfig

    @classmethod
    def load(cls, params: Path) -> TrainSections:
        cfgs = cls(**{f.name: load_section(params, f.name) for f in dataclasses.fields(cls)})
        check_aux_head(cfgs.decision, cfgs.train.leak_aux_weight, str(params))
        return cfgs

    def make_runtime(self) -> Runtime:
        return make_runtime(self.runtime.device, self.runtime.amp, self.runtime.channels_last)


def run_train(paths: TrainPaths, cfgs: TrainSections, *, progress: bool = True) -> int:
    """Train; 0 on success, 128 + signal after a SIGINT / SIGTERM stop (checkpoint written)."""
    with GracefulStop() as stop:
        runtime = cfgs.make_runtime()
        dist = distributed.from_env(runtime.device)
        if not dist.is_main:
            logging.getLogger(leakpipe.__name__).setLevel(logging.WARNING)
        try:
            _run_stage(paths, cfgs, runtime.on(dist.device(runtime.device)), dist, stop, progress)
        except StopRequested as exc:
            log.info("%s (%s); exit %d, %s", exc, stop.name, stop.exit_code,
                     _resume_advice(exc.checkpoint))
            dist.close()
            return stop.exit_code
        dist.close()
    return 0


def _resume_advice(checkpoint: Path | None) -> str:
    """What re-running the stage does: the file it resumes from is the one ``restore`` picks."""
    if checkpoint is None:
        return "no checkpoint written yet: re-running the stage starts over"
    return f"re-run the stage to resume from {checkpoint}"


def _run_stage(paths: TrainPaths, cfgs: TrainSections, runtime: Runtime, dist: Distributed,
               stop: GracefulStop, progress: bool) -> None:
    started = time.time()      # the run spans the stage's work: split checks and loading too
    log.info("train: runtime %s", runtime.describe())
    splits = {"train": paths.train, "val": paths.val}
    trust = trust_splits(paths.validated, splits)
    plan = read_plan(paths.plan)
    data = prepare_training(paths.train, paths.val, plan, cfgs.train, runtime.device,
                            rank=dist.rank,
                            world_size=dist.world_size, local_world_size=dist.local_world_size)
    try:
        with _tracker(cfgs.monitor, dist, trust.tags, started) as tracker:
            trust.log_datasets(tracker, splits)
            tracker.log_params(run_params(cfgs, plan, data, dist))
            result = _fit(paths, cfgs, runtime, dist, stop, progress, data, tracker)
            if dist.is_main:
                _write_outputs(paths, cfgs, data, result, tracker)
    finally:
        data.close()


def _tracker(cfg: MonitorConfig, dist: Distributed, tags: dict[str, str],
             started: float) -> contextlib.AbstractContextManager[Tracker]:
    """Rank 0's run, from ``started`` (when the stage began), tagged with how the splits were
    trusted: each file's sha256 by split, the one digest every stage shows
    (``split_fingerprint`` stays the checkpoints' own)."""
    if not dist.is_main:
        return contextlib.nullcontext(NullTracker())
    return tracking.start_run(STAGE, tags=tags, started_at=started,
                              system_metrics=cfg.mlflow_system_metrics,
                              system_metrics_interval_s=cfg.mlflow_interval_s)


def run_params(cfgs: TrainSections, plan: dict[str, Any], data: TrainingData,
               dist: Distributed) -> dict[str, Any]:
    """Everything that shaped the run, nested (the tracker flattens it to ``train.seed`` ...)."""
    return {
        **{f.name: dataclasses.asdict(getattr(cfgs, f.name))
           for f in dataclasses.fields(cfgs)},
        "preload": {"placement": data.placement, "planned_placement": plan["placement"],
                    "planned_device": plan.get("device", ""), "dtype": plan["dtype"],
                    "buffer_chunks": plan["stream"]["buffer_chunks"],
                    "batch_size_max": plan.get("batch_size", {}).get("max", "")},
        "dist": {"world_size": dist.world_size, "backend": dist.backend or "none"},
    }


def _fit(paths: TrainPaths, cfgs: TrainSections, runtime: Runtime, dist: Distributed,
         stop: GracefulStop, progress: bool, data: TrainingData, tracker: Tracker) -> FitResult:
    if dist.is_main:
        ckpt_io.clear_if_finished(paths.checkpoints)
        _follow_previous_run(tracker, paths.checkpoints)
    dist.barrier()   # no rank resumes from a folder rank 0 is clearing
    probe = TrainMonitor(cfgs.monitor) if cfgs.monitor.enabled and dist.is_main else None
    options = FitOptions(should_stop=stop.requested, probe=probe, dist=dist,
                         progress=progress, data_id=data.data_id)
    try:
        with probe if probe is not None else contextlib.nullcontext():
            result = fit(cfgs.model, cfgs.train, runtime=runtime, decision=cfgs.decision,
                         train_source=data.train_source, val=data.val,
                         class_counts=data.class_counts,
                         tracker=tracker, checkpoint_dir=paths.checkpoints,
                         features=data.features.to_dict(), options=options)
    except StopRequested:
        _log_profile(tracker, probe, runtime.device.type)
        raise
    _log_profile(tracker, probe, runtime.device.type)
    _log_earlier_epochs(tracker, result)
    if dist.any(stop.requested()):    # the signal came during the last validation
        # the re-run resumes from the last epoch checkpoint, not from best.pt
        raise StopRequested("stopped after the last epoch", resume_point(paths.checkpoints))
    return result


def _log_earlier_epochs(tracker: Tracker, result: FitResult) -> None:
    """A resumed run also records the epochs its checkpoint holds, so it shows every epoch."""
    if result.resumed_from is None:
        return
    tracker.set_tags({TAG_RESUMED_FROM: str(result.resumed_from)})
    for metrics in result.history[:len(result.history) - result.epochs_run]:
        tracker.log_metrics(charted_metrics(metrics), step=int(metrics["epoch"]))


def _follow_previous_run(tracker: Tracker, directory: Path) -> None:
    """Close the MLflow run of an unfinished attempt (SIGKILL leaves it RUNNING) as KILLED,
    link this run to it, and record this run as the folder's latest attempt."""
    if tracker.run_id is None:
        return
    marker = directory / ckpt_io.RUN_ID_NAME
    previous = marker.read_text().strip() if marker.is_file() else ""
    if previous and previous != tracker.run_id:
        if tracking.end_run_if_running(previous):
            log.info("mlflow run %s of the interrupted attempt closed as KILLED", previous)
        tracker.set_tags({TAG_PREVIOUS_RUN: previous})
    write_text_atomic(marker, tracker.run_id + "\n")


def _log_profile(tracker: Tracker, probe: TrainMonitor | None, device: str) -> None:
    """The profile artifact, with the device type the run trained on (its figure's title
    says "CPU run (no GPU)" rather than why NVML found no GPU)."""
    if probe is None:
        return
    with tracking.scratch_dir() as folder:
        for path in write_profile({**probe.profile(), "device": device}, folder):
            tracker.log_artifact(path, "profile")


def _write_outputs(paths: TrainPaths, cfgs: TrainSections, data: TrainingData,
                   result: FitResult, tracker: Tracker) -> None:
    from leakpipe.files import file_sha256

    save_model(paths.model, result, data, cfgs.model, cfgs.train)
    summary = metrics_summary(result, data.placement)
    write_json_atomic(paths.metrics, summary)
    write_text_atomic(paths.plots, history_csv(result.history))
    tracker.set_tags({tracking.TAG_MODEL_SHA256: file_sha256(paths.model)})
    _log_results(tracker, result, data, cfgs, paths)
    ckpt_io.mark_finished(paths.checkpoints)
    log.info("train: best epoch %d of %d, %s %.4f, file threshold %.2f (%s) -> %s",
             result.best_epoch + 1, len(result.history), result.monitor,
             result.best_metrics.get(result.monitor, math.nan), result.threshold,
             result.stop_reason, paths.model)


def _log_results(tracker: Tracker, result: FitResult, data: TrainingData,
                 cfgs: TrainSections, paths: TrainPaths) -> None:
    """The best epoch as a note and a table (not as one-point metrics: the run's charts are
    its per-epoch curves), the metrics file and plot data, the confusion matrices, the model."""
    tracker.add_note(best_epoch_note(result))
    tracker.log_table(best_epoch_table(result), BEST_EPOCH_TABLE)
    for path in (paths.metrics, paths.plots):
        tracker.log_artifact(path, STAGE)
    if result.best_confusion is not None:
        tracker.log_dict(result.best_confusion, f"{STAGE}/confusion.json")
        tracker.log_figure(confusion_figure(result.best_confusion), f"{STAGE}/confusion.png")
    scorer = SegmentScorer(copy.deepcopy(result.model).cpu().eval(),
                           leak_index(data.class_names), cfgs.decision.prob_mode)
    tracker.log_model(scorer, input_example(data.val), code_paths=[PACKAGE_DIR])


def best_epoch_table(result: FitResult) -> dict[str, list[Any]]:
    """The best epoch's figures as two columns (metric, value), in the names the per-epoch
    charts use; ``epoch`` is the charts' step (0-based)."""
    rows = [("epoch", float(result.best_epoch))]
    rows += [(k, float(v)) for k, v in sorted(result.best_metrics.items())
             if k != "epoch" and math.isfinite(v)]
    return {"metric": [k for k, _ in rows], "value": [v for _, v in rows]}


def best_epoch_note(result: FitResult) -> str:
    """One paragraph of the run's description: which epoch won, by what, how training ended."""
    value = result.best_metrics.get(result.monitor, math.nan)
    return (f"Best epoch {result.best_epoch + 1} of {len(result.history)} (step "
            f"{result.best_epoch} in the charts): {result.monitor} {value:.4f}, file threshold "
            f"{result.threshold:.2f}; {result.stop_reason}. Its figures: {BEST_EPOCH_TABLE}.")
