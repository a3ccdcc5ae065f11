"""`leakpipe adapt`: adapt the evaluated detector to field recordings (DVC stage `adapt`).

Rounds of pseudo-labelling of the unlabelled recordings in ``adapt.source``, each a fine-tune
with the train stage's ``fit()`` on the labelled train split plus the pseudo-labelled segments,
checked on the labelled val split (docs/adaptation.md). Resumes from ``--work`` after a kill.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    validated_stamp,
)

NAME = "adapt"
HELP = "adapt a detector to unlabelled field recordings by rounds of pseudo-labelling"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--detector", type=Path, default=Path("models/detector.pt"),
                        help="the detector to adapt (evaluate's, with its operating point)")
    parser.add_argument("--train", type=Path, default=Path("data/processed/train.h5"),
                        help="labelled training split (HDF5), kept in every round")
    parser.add_argument("--val", type=Path, default=Path("data/processed/val.h5"),
                        help="labelled val split (HDF5): operating point and round check")
    parser.add_argument("--plan", type=Path, default=Path("reports/preload.json"),
                        help="the preload stage's memory plan")
    parser.add_argument("--work", type=Path, default=Path("checkpoints/adapt"),
                        help="round state and checkpoints; a run in it with the same inputs "
                             "is resumed")
    parser.add_argument("--network", type=Path, default=Path("models/adapted.pt"),
                        help="adapted network to write")
    parser.add_argument("--adapted", type=Path, default=Path("models/adapted_detector.pt"),
                        help="adapted detector to write (operating point re-chosen on val)")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/adapt.json"),
                        help="per-round figures (JSON)")
    parser.add_argument("--plots", type=Path, default=Path("plots/adapt/rounds.csv"),
                        help="per-round table (CSV) for `dvc plots`")
    parser.add_argument("--figure", type=Path, default=Path("plots/adapt/rounds.png"),
                        help="per-round figure (PNG)")
    add_validated_arguments(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    from leakpipe.adapt.stage import AdaptPaths, AdaptSections, run_adapt

    paths = AdaptPaths(detector=args.detector, train=args.train, val=args.val,
                       validated=validated_stamp(args), plan=args.plan,
                       work=args.work, network=args.network, adapted=args.adapted,
                       metrics=args.metrics, plots=args.plots, figure=args.figure)
    return run_adapt(paths, AdaptSections.load(args.params), progress=not args.no_progress)
