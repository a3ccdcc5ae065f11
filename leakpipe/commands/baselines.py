"""`leakpipe baselines`: the paper's MFCC baselines against the CNN (DVC stage `baselines`).

Fits random forest, SVM and XGBoost on 16 MFCC summaries per clip and a level-only logistic
regression, chooses hyper-parameters and threshold on val as `evaluate` does, reports on test
and compares with the CNN's `metrics/eval.json`. Writes `metrics/baselines.json` and the plot
`plots/baselines/comparison.json`; logs one MLflow parent run `baselines` with one child run
per model (tag ``leakpipe.baseline``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leakpipe import tracking
from leakpipe.commands._common import add_params_argument
from leakpipe.config import load_section
from leakpipe.constants import SPLITS
from leakpipe.errors import DataError

if TYPE_CHECKING:
    from leakpipe.baselines.comparison import BaselineReport, ModelResult

NAME = "baselines"
HELP = "the paper's MFCC baselines (random forest, SVM, XGBoost) and a level-only control"
TAG_BASELINE = "leakpipe.baseline"     # on a child run: which model it holds
EVALUATE_KEYS = ("criterion", "target", "bootstrap_resamples", "confidence",
                 "seed")  # the evaluate keys baselines use (and the `decision` grid)
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="folder holding train.h5, val.h5 and test.h5")
    parser.add_argument("--validated", type=Path, default=None,
                        help="the stamp `validate` writes; refuse splits it did not pass")
    parser.add_argument("--cnn-metrics", type=Path, default=Path("metrics/eval.json"),
                        help="the CNN's evaluate metrics to compare with (skipped when absent)")
    parser.add_argument("--cnn-predictions", type=Path, default=Path("reports/predictions.csv"),
                        help="evaluate's per-clip decisions: a paired interval of the margin "
                             "(skipped when absent)")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/baselines.json"),
                        help="DVC metrics file")
    parser.add_argument("--plots-dir", type=Path, default=Path("plots/baselines"),
                        help="folder of the DVC plot file comparison.json")


def read_eval_metrics(path: Path) -> dict[str, Any] | None:
    """evaluate's metrics as flat ``test/file_f1`` names; None when the file does not exist."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        log.info("%s not found: the comparison leaves the CNN out", path)
        return None
    except json.JSONDecodeError:
        raise DataError(f"{path}: not valid JSON; re-run `dvc repro evaluate`") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object of evaluate metrics")
    return tracking.flatten(raw, sep="/")


def run(args: argparse.Namespace) -> int:
    from leakpipe.baselines.comparison import read_cnn_decisions, run_baselines, write_outputs
    from leakpipe.commands.preload import check_validated
    from leakpipe.preload import read_shapes

    cfg = load_section(args.params, NAME)
    ev, decision = load_section(args.params, "evaluate"), load_section(args.params, "decision")
    paths = {split: args.data_dir / f"{split}.h5" for split in SPLITS}
    if args.validated is not None:
        check_validated(args.validated, read_shapes(paths))
    report = run_baselines(paths, cfg, ev, decision, read_eval_metrics(args.cnn_metrics),
                           str(args.cnn_metrics), read_cnn_decisions(args.cnn_predictions),
                           str(args.cnn_predictions))
    write_outputs(report, metrics_path=args.metrics, plots_dir=args.plots_dir)
    with tracking.start_run(NAME) as parent:
        parent.log_params({NAME: dataclasses.asdict(cfg),
                           "evaluate": {k: getattr(ev, k) for k in EVALUATE_KEYS},
                           "decision": dataclasses.asdict(decision)})
        parent.log_metrics({f"comparison/{k}": v for k, v in report.comparison.items()
                            if isinstance(v, float) and math.isfinite(v)})
        parent.set_tags({f"comparison/{k}": v for k, v in report.comparison.items()
                         if isinstance(v, str)})
        parent.log_artifact(args.metrics, NAME)
        parent.log_artifact(args.plots_dir / "comparison.json", f"{NAME}/plots")
        for result in report.results.values():
            _log_model_run(parent.run_id, result, cfg)
    print(_summary(report, args.metrics))
    return 0


def _log_model_run(parent_id: str | None, result: ModelResult, cfg: Any) -> None:
    """One child run per model: its chosen hyper-parameters, figures and the grid it searched."""
    with tracking.start_run(NAME, tags={TAG_BASELINE: result.name},
                            parent_run_id=parent_id) as run:
        run.set_tags({"mlflow.runName": f"{NAME}-{result.name}"})
        run.log_params({"model": result.name, "hyperparams": result.hyper,
                        "n_mfcc": cfg.n_mfcc, "summary": cfg.summary, "seed": cfg.seed})
        run.log_metrics({k: v for k, v in result.metrics.items() if math.isfinite(v)})
        run.log_dict({"grid": result.grid}, f"{NAME}/{result.name}_grid.json")


def _summary(report: BaselineReport, path: Path) -> str:
    parts = [f"{name} F1 {r.metrics['test/file_f1']:.3f} (ROC-AUC "
             f"{r.metrics['test/file_roc_auc']:.3f})" for name, r in report.results.items()]
    c = report.comparison
    if "margin_file_f1" in c:
        parts.append(f"CNN F1 {c['cnn_file_f1']:.3f}, margin over {c['best_baseline']} "
                     f"{c['margin_file_f1']:+.3f}")
    return f"baselines: test files: {'; '.join(parts)} -> {path}"
