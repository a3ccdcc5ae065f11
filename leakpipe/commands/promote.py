"""`leakpipe promote`: move the registry alias ``champion`` to ``candidate`` when the candidate
is at least as good on the test split (not a DVC stage: it changes registry state, not files).

Both detectors score the test split at their own operating points; the candidate is promoted
iff the lower end of the paired bootstrap interval of F1(candidate) - F1(champion) is >=
-promote.margin (no champion yet: it is promoted). Exit codes: 0 promoted (or nothing to do),
4 refused (aliases unchanged, one line says why), 1 / 2 / 3 errors
(``leakpipe.evaluate.promotion``). The decision is the first line printed; ``-v`` adds both
detectors' model cards after it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    validated_stamp,
)

NAME = "promote"
HELP = ("make the registry's candidate detector the champion if it is at least as good on the "
        "test split (paired bootstrap of the F1 difference); -v: the model cards too")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--test", type=Path, default=Path("data/processed/test.h5"),
                        help="held-out test split both detectors score "
                             "(default: data/processed/test.h5)")
    parser.add_argument("--plan", type=Path, default=Path("reports/preload.json"),
                        help="the preload plan (placement, memory safety and reserves)")
    add_validated_arguments(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the decision only: no MLflow run, no alias moved (the exit "
                             "code is the decision's)")
    parser.add_argument("--no-progress", action="store_true",
                        help="hide the progress bars (hidden anyway when stderr is not a "
                             "terminal)")


def run(args: argparse.Namespace) -> int:
    from leakpipe.evaluate.promotion import PromotePaths, run_promote

    paths = PromotePaths(test=args.test, plan=args.plan, validated=validated_stamp(args))
    # a progress bar only where a person watches: redirected output gets none
    return run_promote(paths, args.params, dry_run=args.dry_run,
                       progress=not args.no_progress and sys.stderr.isatty(),
                       cards=args.verbose)
