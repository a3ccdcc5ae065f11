"""`leakpipe export`: the detector's scoring network as ONNX plus its rules as JSON (edge)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "export"
HELP = ("export a detector for edge devices: the segment scorer as ONNX, the rules that turn "
        "its outputs into decisions as JSON")
FORMATS = ("onnx",)   # leakpipe.export.stage.FORMATS; not imported: --help stays light


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="onnx",
                        help="model format (default: onnx)")
    parser.add_argument("--model", default="models/shipped.pt",
                        help="detector file of any kind, or an MLflow URI such as "
                             "models:/<name>/<version> (default: models/shipped.pt, the kind "
                             "grouped CV selected, written by stage ship; models/detector.pt "
                             "is evaluate's CNN)")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for model.onnx and rules.json (created if missing)")


def run(args: argparse.Namespace) -> int:
    from leakpipe.export.stage import run_export

    return run_export(args.model, args.out, args.format)
