"""`leakpipe build`: recordings -> segmented log-mel HDF5 per split (DVC stage `build`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._cluster import add_cluster_arguments, cluster_settings
from leakpipe.commands._common import add_params_argument, positive_int
from leakpipe.data.manifest import GROUP_BY

NAME = "build"
HELP = "segment recordings into two-stage log-mel HDF5 files (train / val / test)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--source", type=Path, default=None,
                        help="manifest CSV or recordings folder (default: build.source)")
    parser.add_argument("--group-by", choices=GROUP_BY, default=None,
                        help="folder sources: which files share a group (default: "
                             "build.group_by; see docs/data-format.md)")
    parser.add_argument("--out-dir", type=Path, default=Path("data/processed"),
                        help="folder for train.h5 / val.h5 / test.h5")
    parser.add_argument("--report", type=Path, default=Path("reports/build.json"),
                        help="JSON report: counts, unusable files, timing")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_cluster_arguments(parser)
    parser.add_argument("--verify", type=positive_int, default=0, metavar="N",
                        help="recompute N recordings (spread over the manifest) in this process "
                             "and compare them with what the workers returned; the report's "
                             "`verify` says which differ (default 0: none)")


def run(args: argparse.Namespace) -> int:
    from leakpipe.build import run_build

    return run_build(args.params, args.source, args.out_dir, args.report,
                     group_by=args.group_by, progress=not args.no_progress,
                     cluster=cluster_settings(args), verify=args.verify)
