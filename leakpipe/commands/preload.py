"""`leakpipe preload`: decide where training keeps its data (DVC stage `preload`).

Reads the split shapes (metadata only), measures free host / cgroup / GPU memory, estimates
what training holds under each placement and writes the decision to reports/preload.json,
which `train` and `tune` depend on. With ``--validated`` it first checks that `validate`
passed on these very splits (``leakpipe.preload.stage``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import add_params_argument
from leakpipe.constants import SPLITS

NAME = "preload"
HELP = "plan where training keeps its data (GPU, RAM or streamed) from measured memory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="folder holding <split>.h5 (default: data/processed)")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS),
                        help=f"splits to estimate (default: {' '.join(SPLITS)}; needs train)")
    parser.add_argument("--validated", type=Path, default=None,
                        help="the stamp `validate` writes; refuse splits it did not pass")
    parser.add_argument("--report", type=Path, default=Path("reports/preload.json"),
                        help="the plan (JSON)")


def run(args: argparse.Namespace) -> int:
    from leakpipe.preload.stage import run_preload

    splits = {split: args.data_dir / f"{split}.h5" for split in args.splits}
    return run_preload(splits, args.report, args.params, validated=args.validated)
