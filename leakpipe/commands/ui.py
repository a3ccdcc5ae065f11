"""`leakpipe ui`: the MLflow UI on the project's tracking store, bound to 127.0.0.1 by default.

Runs ``mlflow server`` on ``leakpipe.tracking.tracking_uri()`` (the project's SQLite store, or
``MLFLOW_TRACKING_URI``) until Ctrl-C. When tracking goes to a remote server already, there is
nothing to start: the command prints where to look.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

from leakpipe import tracking

NAME = "ui"
HELP = "browse runs, metrics, figures and models in the MLflow UI (mlflow server)"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
LOCAL_SCHEMES = ("sqlite:", "file:", "postgresql", "mysql", "mssql")
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to bind (default: {DEFAULT_HOST}, this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port (default: {DEFAULT_PORT})")


def server_command(uri: str, host: str, port: int) -> list[str]:
    """The ``mlflow server`` command line for a backend store URI."""
    artifacts = tracking.artifact_root()
    artifacts.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
            "--default-artifact-root", artifacts.as_uri(), "--host", host, "--port", str(port),
            "--workers", "1"]


def run(args: argparse.Namespace) -> int:
    uri = tracking.tracking_uri()
    if not uri.startswith(LOCAL_SCHEMES):
        print(f"ui: tracking goes to {uri}; open it in a browser (nothing to start here)")
        return 0
    command = server_command(uri, args.host, args.port)
    log.info("MLflow UI for %s on http://%s:%d (Ctrl-C stops it)", uri, args.host, args.port)
    return subprocess.call(command)
