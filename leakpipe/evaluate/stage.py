"""The evaluate stage: network -> operating point on val -> figures on test -> detector, run.

``run_evaluate`` is what `leakpipe evaluate` (and stages/evaluate.py) calls:

1. the runtime (device, precision) and the preload plan's batch caps, decided once; val and
   test checked against the validation stamp (``leakpipe.data.stamp``);
2. one MLflow run from the stage's start, tagged with the network file's sha256, linked to the
   train run that wrote it when MLflow knows one;
3. ``evaluate_detector`` scores val, chooses the operating point there, scores test;
4. the DVC outputs (metrics, plot files, predictions, the detector file) are written atomically,
   then the same figures, the confusion / ROC / PR / threshold / reliability plots, the
   predictions table and the detector are logged to the run;
5. the model card (``leakpipe.evaluate.model_card``: intended use, data, test figures with
   intervals, per-condition figures from the source's manifest, the sim-to-real figures, known
   limits) is written to ``reports/model_card.md`` and logged;
6. the detector is logged as the served MLflow pyfunc model (tag ``leakpipe.detector_uri``) and
   the run is tagged with the detector file's sha256 (``leakpipe.detector_sha256``), by which
   stage `ship` finds this run (and the network's train run) when it ships this detector.
   evaluate registers nothing: the registry's ``candidate`` is the **shipped** detector, of
   whichever kind grouped CV selected, and stage `ship` registers it (``leakpipe.ship.
   registration``), so one repro makes one candidate; `leakpipe promote` decides whether it
   becomes ``champion``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from leakpipe import tracking
from leakpipe.allocator import retain_freed_memory
from leakpipe.config import load_section
from leakpipe.data.stamp import trust_splits
from leakpipe.detector import load_network
from leakpipe.errors import DataError
from leakpipe.evaluate.detector_evaluation import (
    Evaluation,
    batch_limits,
    detector_of,
    evaluate_detector,
    evaluation_figures,
    write_outputs,
)
from leakpipe.evaluate.model_card import CardInputs, manifest_conditions, model_card
from leakpipe.evaluate.registration import training_text
from leakpipe.files import file_sha256, write_text_atomic
from leakpipe.preload.plan import read_plan
from leakpipe.runtime import make_runtime
from leakpipe.tracking import Tracker

STAGE = "evaluate"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluatePaths:
    """What the stage reads (model, data folder, plan) and writes (everything else)."""

    model: Path
    data_dir: Path
    plan: Path
    metrics: Path
    plots_dir: Path
    predictions: Path
    detector: Path
    validated: Path | None     # the validation stamp; None: --unvalidated (tagged, warned)
    model_card: Path | None = None      # None: no card written
    sim_to_real: Path | None = None     # benchmarks/studies/sim_to_real.py's JSON for the card

    def split(self, name: str) -> Path:
        return self.data_dir / f"{name}.h5"


def run_evaluate(paths: EvaluatePaths, params: Path, *, progress: bool = True) -> int:
    """The whole stage; returns the exit code (errors raise ``LeakpipeError``)."""
    started = time.time()    # the run spans the stage: hashing the splits, loading the network
    cfg, decision = load_section(params, STAGE), load_section(params, "decision")
    rt = load_section(params, "runtime")
    build = load_section(params, "build")   # the detector keeps its scoring and signal rules
    runtime = make_runtime(rt.device, rt.amp, rt.channels_last)
    splits = {s: paths.split(s) for s in ("val", "test")}
    trust = trust_splits(paths.validated, splits)
    retain_freed_memory()                 # CPU inference reuses its activation buffers
    network = load_network(paths.model)
    plan = read_plan(paths.plan)
    sha = file_sha256(paths.model)
    with tracking.start_run(STAGE, tags={tracking.TAG_MODEL_SHA256: sha, **trust.tags},
                            started_at=started) as run:
        trust.log_datasets(run, splits)
        run.log_params({STAGE: dataclasses.asdict(cfg), "decision": dataclasses.asdict(decision),
                        "runtime": dataclasses.asdict(rt), "model_file": str(paths.model)})
        train_run = _link_train_run(run, sha)
        evaluation = evaluate_detector(network, {**splits, **_train_split(paths)}, plan, cfg,
                                       decision, runtime, progress=progress)
        detector = detector_of(evaluation, network, batch_limits(plan, cfg),
                               build.min_clip_fraction, quality=build.quality)
        write_outputs(evaluation, detector, metrics_path=paths.metrics,
                      plots_dir=paths.plots_dir, predictions_path=paths.predictions,
                      detector_path=paths.detector)
        data = tracking.run_tag(train_run, tracking.TAG_DATA) if train_run else None
        card = _card_inputs(evaluation, detector, cfg.confidence, sha, trust.sha256["test"],
                            training_text(data), build.source, paths,
                            train_run)
        if paths.model_card is not None:
            write_text_atomic(paths.model_card, model_card(card))
        run.set_tags({tracking.TAG_DETECTOR_SHA256: file_sha256(paths.detector)})
        _log_evaluation(run, evaluation, paths)
    print(summary_line(evaluation, paths.metrics))
    return 0


def _card_inputs(evaluation: Evaluation, detector: object, confidence: float, model_sha: str,
                 test_sha: str, training: str, source: str, paths: EvaluatePaths,
                 train_run: str | None) -> CardInputs:
    """What the model card says, from the evaluation, the source's manifest and the
    sim-to-real report (when ``paths.sim_to_real`` names a file that exists)."""
    table, point = evaluation.test.table, evaluation.point
    report = None
    if paths.sim_to_real is not None and paths.sim_to_real.is_file():
        try:
            report = json.loads(paths.sim_to_real.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataError(f"{paths.sim_to_real}: not a sim-to-real JSON report ({exc})") from None
    return CardInputs(
        network=detector, metrics=evaluation.metrics, rule=point.rule, threshold=point.threshold,
        prob_threshold=detector.prob_threshold, criterion=point.criterion,
        confidence=confidence, model_sha=model_sha, test_sha=test_sha, training=training,
        source=str(source), truth=table.truth, decision=evaluation.test.decision,
        recording_ids=table.recording_id.astype(str), groups=table.group.astype(str),
        conditions=manifest_conditions(Path(source)), sim_to_real=report,
        sim_to_real_path=str(paths.sim_to_real or ""), train_run=train_run,
        detector_sha=file_sha256(paths.detector))


def _train_split(paths: EvaluatePaths) -> dict[str, Path]:
    """train.h5 for the detector's domain reference (the training distribution); none and a
    WARNING when the data folder lacks it (the detector then reports domain unknown)."""
    path = paths.split("train")
    if path.is_file():
        return {"train": path}
    log.warning("%s: no train split; the detector gets no domain reference", path)
    return {}


def _link_train_run(run: Tracker, sha: str) -> str | None:
    """Tag the run with the train run that wrote this network (found by its sha256); its id."""
    train_run = tracking.find_run_id("train", {tracking.TAG_MODEL_SHA256: sha})
    if train_run is None:
        log.info("no MLflow train run is tagged with this model's sha256; not linked")
        return None
    run.set_tags({tracking.TAG_TRAIN_RUN: train_run})
    return train_run


def _log_evaluation(run: Tracker, evaluation: Evaluation, paths: EvaluatePaths) -> str | None:
    """Everything to the run; the logged detector's ``models:/`` URI (None: no MLflow run)."""
    run.set_tags(evaluation.info)
    tracking.log_summary(run, evaluation.metrics, STAGE)
    for name, figure in evaluation_figures(evaluation).items():
        run.log_figure(figure, f"{STAGE}/{name}.png")
    rows = evaluation.test.rows(evaluation.calibration)
    run.log_table({key: [row[key] for row in rows] for key in rows[0]},
                  f"{STAGE}/predictions.json")
    run.log_artifact(paths.predictions, STAGE)
    run.log_artifact(paths.metrics, STAGE)
    if paths.model_card is not None:
        run.log_artifact(paths.model_card, STAGE)
    for path in sorted([*paths.plots_dir.glob("*.json"), *paths.plots_dir.glob("*.csv")]):
        run.log_artifact(path, f"{STAGE}/plots")
    if run.run_id is None:
        return None
    from leakpipe.serve.model import log_served_detector  # loads mlflow.pyfunc: only here

    uri = log_served_detector(paths.detector)
    run.set_tags({tracking.TAG_DETECTOR_URI: uri})
    return uri


def summary_line(evaluation: Evaluation, path: Path) -> str:
    m, point = evaluation.metrics, evaluation.point
    recordings = len(set(evaluation.test.table.recording_id.tolist()))
    return (f"evaluate: {point.rule} at threshold {point.threshold:g} (chosen on val by "
            f"{point.criterion}); test: {int(m['test/clips'])} clips of {recordings} "
            f"recordings, per clip F1 {m['test/clip_f1']:.3f}, sensitivity "
            f"{m['test/clip_recall']:.3f}, specificity {m['test/clip_specificity']:.3f}, ROC-AUC "
            f"{m['test/clip_roc_auc']:.3f} -> {path}")
