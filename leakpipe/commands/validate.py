"""`leakpipe validate`: check the HDF5 splits before training (DVC stage `validate`).

On success it writes the JSON report, the HTML report and the stamp that `preload` depends on.
On failure it writes the report beside the JSON path as ``<name>.failed.json`` / ``.html``
(never a DVC output), removes stale success outputs and exits non-zero with one line naming
the split, the check and the offending files. Both outcomes are logged to MLflow
(``leakpipe.validate.stage``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import add_params_argument
from leakpipe.constants import SPLITS

NAME = "validate"
HELP = "check the HDF5 splits (structure, values, classes, leakage between splits)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="folder holding <split>.h5 (default: data/processed)")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS),
                        help=f"splits to check, in order (default: {' '.join(SPLITS)})")
    parser.add_argument("--report", type=Path, default=Path("reports/validation.json"),
                        help="JSON report, written on success")
    parser.add_argument("--html", type=Path, default=Path("reports/validation.html"),
                        help="HTML report, written on success")
    parser.add_argument("--stamp", type=Path, default=Path("reports/validated.json"),
                        help="what passed (split sizes and checksums); `preload` depends on it")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    # torch, pandas, great-expectations: only when validating
    from leakpipe.validate.stage import ValidateOutputs, run_validate

    splits = {split: args.data_dir / f"{split}.h5" for split in args.splits}
    outputs = ValidateOutputs(report=args.report, html=args.html, stamp=args.stamp)
    return run_validate(splits, outputs, args.params, progress=not args.no_progress)
