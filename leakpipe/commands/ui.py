"""`leakpipe ui`: the MLflow UI on the project's tracking store, bound to 127.0.0.1 by default.

Runs ``mlflow server`` on ``leakpipe.tracking.tracking_uri()`` (the project's SQLite store, or
``MLFLOW_TRACKING_URI``) until Ctrl-C or SIGTERM / SIGHUP, and then stops the server's worker
processes too (``leakpipe.tracking.server``). When tracking goes to a remote server already,
there is nothing to start: the command prints where to look.
"""

from __future__ import annotations

import argparse

from leakpipe.tracking.server import DEFAULT_HOST, DEFAULT_PORT, run_ui

NAME = "ui"
HELP = "browse runs, metrics, figures and models in the MLflow UI (mlflow server)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to bind (default: {DEFAULT_HOST}, this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port (default: {DEFAULT_PORT})")


def run(args: argparse.Namespace) -> int:
    return run_ui(args.host, args.port)
