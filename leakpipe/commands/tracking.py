"""`leakpipe tracking repoint`: point the project's MLflow store at the folder it lies in now.

A project folder that was moved or copied keeps absolute artifact locations in its SQLite
store (MLflow records them so). Every stage and `leakpipe ui` repoint the store by themselves
when its artifacts came along (``leakpipe.tracking.relocate.follow_move``); this command does
it on request: after the artifacts were moved by hand, to see what would change
(``--dry-run``), or from a folder the store cannot tell (``--from``). docs/tracking.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.errors import ConfigError, DataError

NAME = "tracking"
HELP = ("the MLflow store: `repoint` rewrites its artifact locations to this folder after the "
        "project was moved or copied")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    repoint = sub.add_parser("repoint", help="rewrite the store's artifact locations to the "
                             "folder it lies in now", description=(
        "Rewrite the artifact locations of the store's experiments, runs, logged models and "
        "model versions that lie under the folder the store was made in (or --from) to the "
        "same places under the store's folder now (mlruns/ of this project, or the SQLite "
        "store MLFLOW_TRACKING_URI names)."))
    repoint.add_argument("--from", dest="old", type=Path, action="append", metavar="FOLDER",
                         help="the store's old folder (the one that held mlflow.db); default: "
                              "read from the store's experiments; may be repeated")
    repoint.add_argument("--dry-run", action="store_true",
                         help="only count the locations that would change")


def run(args: argparse.Namespace) -> int:
    from leakpipe import tracking

    uri = tracking.tracking_uri()
    store = tracking.store_file(uri)
    if store is None:
        raise ConfigError(f"MLFLOW_TRACKING_URI={tracking.shown_tracking_uri()}: not a SQLite "
                          "store; a server or database store keeps its own artifact locations")
    if not store.is_file():
        raise DataError(f"{store}: no MLflow store here (no stage has logged a run yet)")
    old = [p.absolute() for p in args.old] if args.old else None
    result = tracking.repoint(store, old, dry_run=args.dry_run)
    verb = "would repoint" if args.dry_run else "repointed"
    print(f"tracking: {verb} {result.summary()}" if result.old else
          f"tracking: {result.summary()}; nothing to do")
    return 0
