"""`leakpipe explain`: a figure and a JSON per recording saying which segments and which mel
bands made the detector's call (band occlusion)."""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import add_params_argument, positive_int

NAME = "explain"
HELP = ("explain the detector's call on recordings: long-segment votes over time and the mel "
        "bands that drove it (band occlusion), as PNG + JSON per recording")
FILLS = ("floor", "median")   # leakpipe.explain.occlusion.FILLS; not imported: --help stays light


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="REC",
                        help="recordings, or folders searched recursively for them")
    parser.add_argument("--model", default="models/shipped.pt",
                        help="detector file of any kind, or an MLflow URI such as "
                             "models:/<name>/<version> (default: models/shipped.pt, the kind "
                             "grouped CV selected, written by stage ship; models/detector.pt "
                             "is evaluate's CNN)")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for <recording>.png and <recording>.json")
    parser.add_argument("--bands-per-group", type=positive_int, default=4,
                        help="adjacent mel bands occluded together (default: 4, i.e. 16 groups "
                             "of the default 64 bands)")
    parser.add_argument("--fill", choices=FILLS, default="floor",
                        help="level an occluded band is set to: the recording's floor (5th "
                             "percentile log-mel, default) or its median (docs/explain.md)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the model runs (default: auto = cuda when available)")
    add_params_argument(parser)   # scoring rules for detector files that do not hold them


def run(args: argparse.Namespace) -> int:
    from leakpipe.explain.stage import run_explain

    return run_explain(args.paths, args.model, args.out, args.params, device=args.device,
                       bands_per_group=args.bands_per_group, fill=args.fill)
