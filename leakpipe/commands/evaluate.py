"""`leakpipe evaluate`: operating point chosen on val, figures on test (DVC stage `evaluate`).

Writes `metrics/eval.json`, the DVC plot files, `reports/predictions.csv` and the detector file
with the chosen operating point; logs the same figures, confusion / ROC / PR / threshold
figures, the predictions table and the detector (as an MLflow model) to one MLflow run, tagged
with the train run that produced the model when MLflow knows it.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

from leakpipe import tracking
from leakpipe.commands._common import add_params_argument
from leakpipe.config import load_section

if TYPE_CHECKING:
    from leakpipe.evaluate.detector_evaluation import Evaluation
    from leakpipe.tracking import Tracker

NAME = "evaluate"
HELP = "choose the decision threshold on val, report file-level metrics on test"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--model", type=Path, default=Path("models/model.pt"),
                        help="trained network written by train (default: models/model.pt)")
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="folder holding val.h5 and test.h5")
    parser.add_argument("--plan", type=Path, default=Path("reports/preload.json"),
                        help="the preload plan (placement, memory safety and reserves)")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/eval.json"),
                        help="DVC metrics file")
    parser.add_argument("--plots-dir", type=Path, default=Path("plots/eval"),
                        help="folder of the DVC plot files")
    parser.add_argument("--predictions", type=Path, default=Path("reports/predictions.csv"),
                        help="one row per test file")
    parser.add_argument("--detector", type=Path, default=Path("models/detector.pt"),
                        help="detector file with the chosen operating point (for predict)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    from leakpipe.allocator import retain_freed_memory
    from leakpipe.detector import load_network
    from leakpipe.evaluate.detector_evaluation import (
        batch_limits,
        detector_of,
        evaluate_detector,
        write_outputs,
    )
    from leakpipe.files import file_sha256
    from leakpipe.preload.plan import read_plan
    from leakpipe.runtime import make_runtime

    cfg, decision = load_section(args.params, NAME), load_section(args.params, "decision")
    rt = load_section(args.params, "runtime")
    runtime = make_runtime(rt.device, rt.amp, rt.channels_last)
    retain_freed_memory()                 # CPU inference reuses its activation buffers
    network = load_network(args.model)
    plan = read_plan(args.plan)
    paths = {split: args.data_dir / f"{split}.h5" for split in ("val", "test")}
    sha = file_sha256(args.model)
    with tracking.start_run(NAME, tags={tracking.TAG_MODEL_SHA256: sha}) as run:
        run.log_params({NAME: dataclasses.asdict(cfg), "decision": dataclasses.asdict(decision),
                        "runtime": dataclasses.asdict(rt), "model_file": str(args.model)})
        _link_train_run(run, sha)
        evaluation = evaluate_detector(network, paths, plan, cfg, decision, runtime,
                                       progress=not args.no_progress)
        detector = detector_of(evaluation, network, batch_limits(plan, cfg),
                               load_section(args.params, "build").min_clip_fraction)
        write_outputs(evaluation, detector, metrics_path=args.metrics, plots_dir=args.plots_dir,
                      predictions_path=args.predictions, detector_path=args.detector)
        _log_evaluation(run, evaluation, args)
    print(_summary(evaluation, args.metrics))
    return 0


def _link_train_run(run: Tracker, sha: str) -> None:
    train_run = tracking.find_run_id("train", {tracking.TAG_MODEL_SHA256: sha})
    if train_run is None:
        log.info("no MLflow train run is tagged with this model's sha256; not linked")
        return
    run.set_tags({tracking.TAG_TRAIN_RUN: train_run})


def _log_evaluation(run: Tracker, evaluation: Evaluation, args: argparse.Namespace) -> None:
    from leakpipe.evaluate.plots import evaluation_figures

    run.set_tags(evaluation.info)
    run.log_metrics({k: v for k, v in evaluation.metrics.items() if math.isfinite(v)})
    for name, figure in evaluation_figures(evaluation).items():
        run.log_figure(figure, f"{NAME}/{name}.png")
    rows = evaluation.test.rows()
    run.log_table({key: [row[key] for row in rows] for key in rows[0]}, f"{NAME}/predictions.json")
    run.log_artifact(args.predictions, NAME)
    run.log_artifact(args.metrics, NAME)
    for path in sorted(args.plots_dir.glob("*.json")):
        run.log_artifact(path, f"{NAME}/plots")
    if run.run_id is not None:
        run.set_tags({tracking.TAG_DETECTOR_URI: tracking.log_detector(args.detector)})


def _summary(evaluation: Evaluation, path: Path) -> str:
    m, point = evaluation.metrics, evaluation.point
    return (f"evaluate: {point.rule} at threshold {point.threshold:g} (chosen on val by "
            f"{point.criterion}); test files {int(m['test/files'])}: F1 {m['test/file_f1']:.3f}, "
            f"sensitivity {m['test/file_recall']:.3f}, specificity "
            f"{m['test/file_specificity']:.3f}, ROC-AUC {m['test/file_roc_auc']:.3f} -> {path}")
