"""`leakpipe index`: hash every recording `build` reads (DVC stage `index`, always run).

No MLflow run: the stage runs on every `dvc repro` and only records the state of the inputs.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from leakpipe.commands._common import add_params_argument
from leakpipe.config import load_section
from leakpipe.files import write_json_atomic

NAME = "index"
HELP = "content-hash every recording build.source names (build depends on the index)"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--source", type=Path, default=None,
                        help="manifest CSV or recordings folder (default: build.source)")
    parser.add_argument("--out", type=Path, default=Path("reports/recordings.json"),
                        help="JSON index: path, bytes and SHA-256 of every recording")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from leakpipe.index import index_recordings

    cfg = load_section(args.params, "build")
    source = args.source or Path(cfg.source)
    workers = cfg.workers or os.cpu_count() or 1
    index = index_recordings(source, workers, progress=not args.no_progress)
    write_json_atomic(args.out, index)
    log.info("index: %d recordings (%.1f MiB) of %s -> %s", index["n_recordings"],
             index["bytes"] / 2**20, source, args.out)
    return 0
