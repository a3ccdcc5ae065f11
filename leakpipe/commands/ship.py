"""`leakpipe ship`: the detector of the kind grouped cross-validation picked (DVC stage `ship`).

``detector.method: auto`` ships `metrics/cv.json`'s ``selected`` kind (``logger_stats``,
``cnn`` or ``fused``) as `models/shipped.pt`, with `metrics/ship.json` saying which and why
(``leakpipe.ship.stage``), its model card, and registers it as the registry's ``candidate``
(``leakpipe.ship.registration``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    validated_stamp,
)

NAME = "ship"
HELP = ("write the detector of the kind grouped CV selected (detector.method) to "
        "models/shipped.pt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--cv", type=Path, default=Path("metrics/cv.json"),
                        help="crossval's summary, read for `selected` when detector.method is "
                             "auto (default: metrics/cv.json)")
    parser.add_argument("--cnn-detector", type=Path, default=Path("models/detector.pt"),
                        help="evaluate's CNN detector, shipped as it is when the kind is cnn")
    parser.add_argument("--cnn-predictions", type=Path,
                        default=Path("reports/predictions.csv"),
                        help="evaluate's test predictions: the cnn kind's recording figures")
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="folder holding train.h5, val.h5 and test.h5")
    parser.add_argument("--shipped", type=Path, default=Path("models/shipped.pt"),
                        help="the shipped detector file (default: models/shipped.pt)")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/ship.json"),
                        help="which kind was shipped and its test figures")
    parser.add_argument("--predictions", type=Path,
                        default=Path("reports/shipped_predictions.csv"),
                        help="a row per val / test recording (logger_stats, fused kinds)")
    parser.add_argument("--model-card", type=Path,
                        default=Path("reports/shipped_model_card.md"),
                        help="the shipped detector's model card (its registered description)")
    parser.add_argument("--cnn-card", type=Path, default=Path("reports/model_card.md"),
                        help="evaluate's model card: the cnn kind's card")
    parser.add_argument("--plots-dir", type=Path, default=Path("plots/ship"),
                        help="the shipped detector's test figures per recording (DVC plots)")
    add_validated_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from leakpipe.ship.stage import ShipPaths, run_ship

    paths = ShipPaths(cv=args.cv, cnn_detector=args.cnn_detector,
                      cnn_predictions=args.cnn_predictions, data_dir=args.data_dir,
                      validated=validated_stamp(args), shipped=args.shipped,
                      metrics=args.metrics, predictions=args.predictions,
                      model_card=args.model_card, cnn_card=args.cnn_card,
                      plots_dir=args.plots_dir)
    return run_ship(paths, args.params)
