"""`leakpipe serve`: a registered detector as a REST service, bound to 127.0.0.1 by default.

Runs ``mlflow models serve --env-manager local`` on the detector (default: the ``champion`` of
``evaluate.registered_model``) with the project's tracking store; POST recordings to
``/invocations`` as JSON (``dataframe_records``: ``waveform``, ``sample_rate``, optional ``id``)
and get `leakpipe predict`'s row for each. Ctrl-C or SIGTERM stops the server and its workers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.config import load_section
from leakpipe.serve.server import DEFAULT_HOST, DEFAULT_PORT, PORTS, default_model, run_serve

NAME = "serve"
HELP = "serve a registered detector over HTTP (mlflow models serve): recordings in, decisions out"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="MLflow model URI (default: models:/<evaluate.registered_model>"
                             "@champion from --params; it exists after `leakpipe promote`)")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"),
                        help="params file naming the registered model (default: params.yaml)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to bind (default: {DEFAULT_HOST}, this machine only)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                        help=f"port, {PORTS[0]} to {PORTS[1]} (default: {DEFAULT_PORT})")
    parser.add_argument("--workers", type=int, default=1,
                        help="server worker processes, each with its own copy of the model "
                             "(default: 1)")


def port_number(text: str) -> int:
    """argparse type: a TCP port to listen on (``PORTS``), refused while parsing."""
    value = int(text)
    if not PORTS[0] <= value <= PORTS[1]:
        raise argparse.ArgumentTypeError(f"must be {PORTS[0]} to {PORTS[1]}, got {value}")
    return value


port_number.__name__ = "int"   # argparse names the type in "invalid int value: 'x'"


def run(args: argparse.Namespace) -> int:
    model = args.model or default_model(load_section(args.params, "evaluate").registered_model)
    return run_serve(model, args.host, args.port, args.workers)
