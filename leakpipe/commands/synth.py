"""`leakpipe synth`: generate the embedded synthetic recordings (DVC stage `synth`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import add_params_argument

NAME = "synth"
HELP = "generate synthetic pipe recordings (WAV) and their manifest.csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--out", type=Path, default=Path("data/raw"),
                        help="output folder (replaced on success)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from leakpipe.audio.synth import run_synth

    return run_synth(args.params, args.out, progress=not args.no_progress)
