"""`leakpipe field`: generate the synthetic field set with a domain shift (DVC stage `field`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import add_params_argument

NAME = "field"
HELP = ("generate the synthetic field set for `adapt`: new sites with an interference the "
        "labelled set lacks (an unlabelled pool, its hidden truth and a labelled check set)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--out", type=Path, default=Path("data/field"),
                        help="output folder (replaced on success; default data/field)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from leakpipe.audio.field import run_field

    return run_field(args.params, args.out, progress=not args.no_progress)
