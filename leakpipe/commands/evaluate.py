"""`leakpipe evaluate`: operating point chosen on val, figures on test (DVC stage `evaluate`).

Writes `metrics/eval.json`, the DVC plot files, `reports/predictions.csv` and the detector file
with the chosen operating point; logs the same figures, confusion / ROC / PR / threshold
figures, the predictions table and the detector (as an MLflow model) to one MLflow run, tagged
with the train run that produced the model when MLflow knows it
(``leakpipe.evaluate.stage``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    validated_stamp,
)

NAME = "evaluate"
HELP = "choose the decision threshold on val, report clip-level metrics on test"


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
    parser.add_argument("--model-card", type=Path, default=Path("reports/model_card.md"),
                        help="the model card, Markdown; ship makes it the registered "
                             "version's description when it ships this detector (default: "
                             "reports/model_card.md)")
    parser.add_argument("--sim-to-real", type=Path, default=None, metavar="JSON",
                        help="benchmarks/studies/sim_to_real.py's report, quoted in the model card "
                             "(default: none; the card then says it was not measured)")
    add_validated_arguments(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    from leakpipe.evaluate.stage import EvaluatePaths, run_evaluate

    paths = EvaluatePaths(model=args.model, data_dir=args.data_dir, plan=args.plan,
                          metrics=args.metrics, plots_dir=args.plots_dir,
                          predictions=args.predictions, detector=args.detector,
                          validated=validated_stamp(args), model_card=args.model_card,
                          sim_to_real=args.sim_to_real)
    return run_evaluate(paths, args.params, progress=not args.no_progress)
