"""`leakpipe index`: hash every recording `build` reads (DVC stage `index`, always run).

No MLflow run: the stage runs on every `dvc repro` and only records the state of the inputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._cluster import add_cluster_arguments, cluster_settings
from leakpipe.commands._common import add_params_argument

NAME = "index"
HELP = "content-hash every recording build.source names (build depends on the index)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--source", type=Path, default=None,
                        help="manifest CSV or recordings folder (default: build.source)")
    parser.add_argument("--out", type=Path, default=Path("reports/recordings.json"),
                        help="JSON index: path, bytes and SHA-256 of every recording")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_cluster_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from leakpipe.index import run_index

    return run_index(args.params, args.source, args.out, progress=not args.no_progress,
                     cluster=cluster_settings(args))
