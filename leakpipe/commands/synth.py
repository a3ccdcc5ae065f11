"""`leakpipe synth`: generate the embedded synthetic recordings (DVC stage `synth`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from leakpipe import tracking
from leakpipe.commands._common import add_params_argument
from leakpipe.config import load_section

NAME = "synth"
HELP = "generate synthetic pipe recordings (WAV) and their manifest.csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--out", type=Path, default=Path("data/raw"),
                        help="output folder (replaced on success)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from leakpipe.audio.synth import generate

    cfg = load_section(args.params, "synth")
    with tracking.start_run(NAME) as run:
        run.log_params({"synth": dataclasses.asdict(cfg)})
        summary = generate(cfg, args.out, progress=not args.no_progress)
        info = summary.to_dict()
        run.log_metrics({"synth/recordings": info["n_recordings"],
                         "synth/seconds": info["seconds"]})
        run.log_dict(info, "synth_summary.json")
    return 0
