"""The baselines stage: MFCC models against the CNN -> metrics, plot, parent + child runs.

``run_baselines`` is what `leakpipe baselines` (and stages/baselines.py) calls: check the
splits against the validation stamp (``leakpipe.data.stamp``), fit and select every model
(``comparison.compare_models``), write `metrics/baselines.json` and the plot file atomically,
then log one MLflow parent run `baselines` with one child run per model (tag
``leakpipe.baseline``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

from leakpipe import tracking
from leakpipe.baselines.cnn_outputs import read_cnn_decisions, read_eval_metrics
from leakpipe.baselines.comparison import PLOT_FILE, BaselineReport, compare_models, write_outputs
from leakpipe.baselines.selection import ModelResult
from leakpipe.config import BaselinesConfig, load_section
from leakpipe.constants import SPLITS
from leakpipe.data.stamp import trust_splits

STAGE = "baselines"
TAG_BASELINE = "leakpipe.baseline"     # on a child run: which model it holds
EVALUATE_KEYS = ("criterion", "target", "bootstrap_resamples", "confidence",
                 "seed")  # the evaluate keys baselines use (and the `decision` grid)


@dataclass(frozen=True)
class BaselinePaths:
    """What the stage reads (splits, stamp, the CNN's outputs) and writes (metrics, plots)."""

    data_dir: Path
    validated: Path | None     # the validation stamp; None: --unvalidated (tagged, warned)
    cnn_metrics: Path
    cnn_predictions: Path
    metrics: Path
    plots_dir: Path

    def splits(self) -> dict[str, Path]:
        return {split: self.data_dir / f"{split}.h5" for split in SPLITS}


def run_baselines(paths: BaselinePaths, params: Path) -> int:
    """The whole stage; returns the exit code (errors raise ``LeakpipeError``)."""
    started = time.time()              # the MLflow run, logged at the end, starts here
    cfg = load_section(params, STAGE)
    ev, decision = load_section(params, "evaluate"), load_section(params, "decision")
    splits = paths.splits()
    trust = trust_splits(paths.validated, splits)
    report = compare_models(splits, cfg, ev, decision, read_eval_metrics(paths.cnn_metrics),
                            str(paths.cnn_metrics), read_cnn_decisions(paths.cnn_predictions),
                            str(paths.cnn_predictions))
    write_outputs(report, metrics_path=paths.metrics, plots_dir=paths.plots_dir)
    with tracking.start_run(STAGE, tags=trust.tags, started_at=started) as parent:
        trust.log_datasets(parent, splits)
        parent.log_params({STAGE: dataclasses.asdict(cfg),
                           "evaluate": {k: getattr(ev, k) for k in EVALUATE_KEYS},
                           "decision": dataclasses.asdict(decision)})
        parent.log_metrics({f"comparison/{k}": v for k, v in report.comparison.items()
                            if isinstance(v, float) and math.isfinite(v)})
        parent.set_tags({f"comparison/{k}": v for k, v in report.comparison.items()
                         if isinstance(v, str)})
        parent.log_artifact(paths.metrics, STAGE)
        parent.log_artifact(paths.plots_dir / PLOT_FILE, f"{STAGE}/plots")
        for result in report.results.values():
            _log_model_run(parent.run_id, result, cfg)
    print(summary_line(report, paths.metrics))
    return 0


def _log_model_run(parent_id: str | None, result: ModelResult, cfg: BaselinesConfig) -> None:
    """One child run per model: its chosen hyper-parameters, figures and the grid it searched."""
    span = result.span or (None, None)
    with tracking.start_run(STAGE, tags={TAG_BASELINE: result.name},
                            parent_run_id=parent_id, started_at=span[0],
                            ended_at=span[1]) as run:
        run.set_tags({"mlflow.runName": f"{STAGE}-{result.name}"})
        run.log_params({"model": result.name, "hyperparams": result.hyper,
                        "n_mfcc": cfg.n_mfcc, "summary": cfg.summary, "seed": cfg.seed})
        tracking.log_summary(run, result.metrics, f"{STAGE}/{result.name}")
        run.log_dict({"grid": result.grid}, f"{STAGE}/{result.name}_grid.json")


def summary_line(report: BaselineReport, path: Path) -> str:
    parts = [f"{name} F1 {r.metrics['test/clip_f1']:.3f} (ROC-AUC "
             f"{r.metrics['test/clip_roc_auc']:.3f})" for name, r in report.results.items()]
    c = report.comparison
    if "margin_clip_f1" in c:
        parts.append(f"CNN F1 {c['cnn_clip_f1']:.3f}, margin over {c['best_baseline']} "
                     f"{c['margin_clip_f1']:+.3f}")
    return f"baselines: test clips: {'; '.join(parts)} -> {path}"
