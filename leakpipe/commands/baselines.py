"""`leakpipe baselines`: the paper's MFCC baselines against the CNN (DVC stage `baselines`).

Fits random forest, SVM and XGBoost on 16 MFCC summaries per clip and a level-only logistic
regression, chooses hyper-parameters and threshold on val as `evaluate` does, reports on test
and compares with the CNN's `metrics/eval.json`. Writes `metrics/baselines.json` and the plot
`plots/baselines/comparison.json`; logs one MLflow parent run `baselines` with one child run
per model (``leakpipe.baselines.stage``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    validated_stamp,
)

NAME = "baselines"
HELP = "the paper's MFCC baselines (random forest, SVM, XGBoost) and a level-only control"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="folder holding train.h5, val.h5 and test.h5")
    add_validated_arguments(parser)
    parser.add_argument("--cnn-metrics", type=Path, default=Path("metrics/eval.json"),
                        help="the CNN's evaluate metrics to compare with (skipped when absent)")
    parser.add_argument("--cnn-predictions", type=Path, default=Path("reports/predictions.csv"),
                        help="evaluate's per-clip decisions: a paired interval of the margin "
                             "(skipped when absent)")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/baselines.json"),
                        help="DVC metrics file")
    parser.add_argument("--plots-dir", type=Path, default=Path("plots/baselines"),
                        help="folder of the DVC plot file comparison.json")


def run(args: argparse.Namespace) -> int:
    from leakpipe.baselines.stage import BaselinePaths, run_baselines

    paths = BaselinePaths(data_dir=args.data_dir, validated=validated_stamp(args),
                          cnn_metrics=args.cnn_metrics, cnn_predictions=args.cnn_predictions,
                          metrics=args.metrics, plots_dir=args.plots_dir)
    return run_baselines(paths, args.params)
