"""`leakpipe train`: train the detector on the HDF5 splits (DVC stage `train`).

Reads the preload plan, trains with ``fit()`` (auto-resuming from ``--checkpoints``), writes the
detector, the metrics file and the per-epoch plot data, and records the run in MLflow. Under
`torchrun --nproc-per-node N` the same command trains with DistributedDataParallel.
Exit codes: 0 done, 130 / 143 stopped by SIGINT / SIGTERM after checkpointing (re-run to resume).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    validated_stamp,
)

NAME = "train"
HELP = "train the leak detector (resumes from its checkpoints; DDP under torchrun)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--train", type=Path, default=Path("data/processed/train.h5"),
                        help="training split (HDF5)")
    parser.add_argument("--val", type=Path, default=Path("data/processed/val.h5"),
                        help="validation split (HDF5): model selection and the threshold")
    parser.add_argument("--plan", type=Path, default=Path("reports/preload.json"),
                        help="the preload stage's memory plan")
    parser.add_argument("--model", type=Path, default=Path("models/model.pt"),
                        help="detector file to write (best epoch, threshold chosen on val)")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/train.json"),
                        help="metrics of the best epoch, stop reason, epochs run (JSON)")
    parser.add_argument("--plots", type=Path, default=Path("plots/train/history.csv"),
                        help="per-epoch metrics (CSV) for `dvc plots`")
    parser.add_argument("--checkpoints", type=Path, default=Path("checkpoints/train"),
                        help="checkpoint folder; an unfinished run in it is resumed")
    add_validated_arguments(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    from leakpipe.train.stage import TrainPaths, TrainSections, run_train

    paths = TrainPaths(train=args.train, val=args.val, plan=args.plan, model=args.model,
                       metrics=args.metrics, plots=args.plots, checkpoints=args.checkpoints,
                       validated=validated_stamp(args))
    return run_train(paths, TrainSections.load(args.params), progress=not args.no_progress)
