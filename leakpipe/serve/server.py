"""`leakpipe serve`: a registered detector behind MLflow's scoring server, on loopback.

It runs ``mlflow models serve -m <model> --env-manager local`` (this environment: leakpipe and
its pinned packages are already here) with the project's tracking store, so ``models:/`` URIs
resolve in its registry, and stops the server's whole process group on Ctrl-C / SIGTERM /
SIGHUP as `leakpipe ui` does. Clients POST recordings to ``/invocations`` (see
``leakpipe.serve`` for the JSON) and ``GET /ping`` answers once the model is loaded.

The address is tried first (``check_address``): a port already taken, or a host that is not
this machine's, is one line before MLflow starts, rather than its server's traceback after.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import sys
from pathlib import Path

from leakpipe import tracking
from leakpipe.errors import DataError
from leakpipe.tracking.server import serve

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5001          # next to the MLflow UI's 5000
PORTS = (1, 65535)           # a TCP port to listen on (0 would pick one no client knows)
SERVED_FLAVOR = "python_function"
ALIAS_URI = re.compile(r"models:/(?P<name>[^/@]+)@(?P<alias>[^/@]+)")


def default_model(registered_model: str) -> str:
    """The version serving is meant to use: the registered model's ``champion``."""
    if not registered_model:
        raise DataError("evaluate.registered_model is empty (no registry in use); name the "
                        "detector with --model")
    return f"models:/{registered_model}@{tracking.ALIAS_CHAMPION}"


def missing_alias(model: str) -> str | None:
    """For a ``models:/<name>@<alias>`` URI whose alias points nowhere yet, the one line that
    says what to run; None when it resolves (or is no alias URI).

    After `make run` the registry holds the ``candidate`` ship registered but no
    ``champion`` until `leakpipe promote` crowns one, and MLflow's own answer ("Registered
    model alias champion not found") names neither the command nor the alternative.
    """
    found = ALIAS_URI.fullmatch(model)
    if found is None:
        return None
    name, alias = found["name"], found["alias"]
    if tracking.alias_version(name, alias) is not None:
        return None
    store = tracking.shown_tracking_uri()
    if tracking.alias_version(name, tracking.ALIAS_CANDIDATE) is None:
        return (f"{model}: no version of {name} has the alias {alias} in {store}, nor the "
                f"alias {tracking.ALIAS_CANDIDATE}: run `dvc repro ship` (or `make run`) "
                "to register a detector first")
    if alias == tracking.ALIAS_CHAMPION:
        return (f"{model}: no {alias} yet in {store}: run `leakpipe promote` (it makes the "
                f"shipped {tracking.ALIAS_CANDIDATE} the {alias}), or serve the candidate "
                f"with --model models:/{name}@{tracking.ALIAS_CANDIDATE}")
    return (f"{model}: no version of {name} has the alias {alias} in {store}; name another "
            f"with --model, e.g. models:/{name}@{tracking.ALIAS_CANDIDATE}")


def check_address(host: str, port: int) -> None:
    """Refuse (``DataError``) an address the server could not listen on: a port out of
    ``PORTS``, a host that does not resolve to this machine, a port already in use. Bound as
    uvicorn binds (``SO_REUSEADDR``), then released at once."""
    if not PORTS[0] <= port <= PORTS[1]:
        raise DataError(f"--port {port}: not a TCP port ({PORTS[0]} to {PORTS[1]})")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port,
                                                             type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise DataError(f"--host {host}: cannot be resolved ({exc.strerror})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DataError(f"--port {port}: already in use on {host} (another server?); "
                                "choose another --port") from None
            raise DataError(f"{host}:{port}: cannot listen there "
                            f"({exc.strerror or exc})") from None


def serve_command(model: str, host: str, port: int, workers: int) -> list[str]:
    """The ``mlflow models serve`` command line for ``model``."""
    return [sys.executable, "-m", "mlflow", "models", "serve", "-m", model,
            "--env-manager", "local", "-h", host, "-p", str(port), "-w", str(workers)]


def scripts_first_env() -> dict[str, str]:
    """This environment with this interpreter's scripts first on PATH: MLflow starts
    ``uvicorn`` and `dvc queue start` its workers by name, which a venv that is not activated
    would not find."""
    scripts = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"}


def serve_environment() -> dict[str, str]:
    """``scripts_first_env`` with the project's tracking store (``models:/`` URIs resolve in
    its registry)."""
    return {**scripts_first_env(), "MLFLOW_TRACKING_URI": tracking.tracking_uri()}


def run_serve(model: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
              workers: int = 1) -> int:
    """Serve ``model`` until a stop signal; returns the exit code. A URI that is not a servable
    model (an alias that points nowhere yet, none there; a detector logged before detectors
    were MLflow models) or an address it could not listen on is a ``DataError`` before
    anything starts."""
    check_address(host, port)
    if (hint := missing_alias(model)) is not None:
        raise DataError(hint)
    if SERVED_FLAVOR not in tracking.model_flavors(model):
        raise DataError(f"{model}: not a servable MLflow model (no {SERVED_FLAVOR} flavor); "
                        "re-run ship to log the detector as one")
    print(f"serve: {model} on http://{host}:{port}/invocations (GET /ping: ready; "
          "Ctrl-C stops it)", flush=True)
    return serve(serve_command(model, host, port, workers), env=serve_environment())
