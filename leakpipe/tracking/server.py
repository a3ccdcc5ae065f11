"""The MLflow UI server on the project's tracking store, and stopping it (or any server that
``serve`` runs: `leakpipe serve` too) completely.

``mlflow server`` runs its web workers as child processes, so stopping only the process
started here would leave them serving. The server gets a process group of its own, and a stop
signal to this process ends that whole group (SIGTERM, then SIGKILL after STOP_TIMEOUT_S); the
exit code is then 128 + the signal number, as a shell reports it. Should this process be
killed outright (SIGKILL: no handler runs), the guard that leads the server's group stops it
instead (``leakpipe.tracking.guard``), so no server outlives its leakpipe.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

from leakpipe.db_urls import redacted
from leakpipe.tracking.guard import guarded
from leakpipe.tracking.names import DEFAULT_EXPERIMENT, UI_MODE_QUERY
from leakpipe.tracking.relocate import follow_move, store_file
from leakpipe.tracking.runs import artifact_root, tracking_uri

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
LOCAL_SCHEMES = ("sqlite:", "file:", "postgresql", "mysql", "mssql")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_TIMEOUT_S = 10.0   # after SIGTERM, how long the server's workers get before SIGKILL
POLL_S = 0.2
log = logging.getLogger(__name__)


def run_ui(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> int:
    """Serve the MLflow UI on the tracking store until a stop signal; returns the exit code.

    When tracking goes to a remote server already there is nothing to start: say where to look.
    """
    uri = tracking_uri()
    if not uri.startswith(LOCAL_SCHEMES):
        print(f"ui: tracking goes to {redacted(uri)}; open it in a browser (nothing to start "
              "here)")
        return 0
    store = store_file(uri)
    if store is not None:
        follow_move(store)      # a moved or copied project shows its own folder's files
    command = server_command(uri, host, port)
    # the runs page first: the server's bare address opens MLflow's GenAI start page
    print(f"ui: the pipeline's runs: {runs_page(uri, host, port)}", flush=True)
    log.info("MLflow UI for %s served at http://%s:%d (Ctrl-C stops it)", redacted(uri), host,
             port)
    return serve(command, ui_environment(os.environ))


def ui_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with MLflow's server-side job execution off unless the user set it: those jobs
    (a runner and several queue consumers, each importing MLflow) serve GenAI scorers that
    leakpipe never schedules, and on a small machine they delay the UI by half a minute."""
    return {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **env}


def runs_page(uri: str, host: str, port: int) -> str:
    """The runs table of the project's experiment in MLflow's model-training mode; the home
    page, in that mode too, while it has none.

    MLflow 3.17's UI takes its mode from the browser's stored choice, GenAI until the user
    changes it, whatever the experiment's kind tag says; the ``workflowType`` URL parameter
    wins over that choice (and the UI keeps it as it moves between pages), so the URL printed
    here opens on runs and models for everyone, not on an empty traces overview."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    base = f"http://{host}:{port}/"
    home = f"{base}#/?{UI_MODE_QUERY}"
    try:
        experiment = MlflowClient(uri).get_experiment_by_name(DEFAULT_EXPERIMENT)
    except MlflowException:
        return home
    if experiment is None:
        return home
    return f"{base}#/experiments/{experiment.experiment_id}/runs?{UI_MODE_QUERY}"


def server_command(uri: str, host: str, port: int) -> list[str]:
    """The ``mlflow server`` command line for a backend store URI."""
    artifacts = artifact_root()
    artifacts.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
            "--default-artifact-root", artifacts.as_uri(), "--host", host, "--port", str(port),
            "--workers", "1"]


def serve(command: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``command`` (in environment ``env``, default this one's) in a process group of its own
    until it exits or this process gets a stop signal; then end the whole group. Returns the
    server's exit code, or 128 + the signal. The server also ends when this process dies
    (``guarded``: the group's leader watches this process)."""
    server = subprocess.Popen(guarded(command, STOP_TIMEOUT_S), start_new_session=True,
                              env=dict(env) if env is not None else None)
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: received.append(signum))
                for sig in STOP_SIGNALS}
    try:
        return _wait(server, received)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server.poll() is None:            # an exception on the way out: leave nothing behind
            _signal_group(server, signal.SIGKILL)
            server.wait()


def _wait(server: subprocess.Popen, received: list[int]) -> int:
    deadline = None
    while True:
        try:
            code = server.wait(timeout=POLL_S)
            return 128 + received[0] if received else code
        except subprocess.TimeoutExpired:
            pass
        if received and deadline is None:
            log.info("stopping the server (signal %d)", received[0])
            _signal_group(server, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
        elif deadline is not None and time.monotonic() > deadline:
            _signal_group(server, signal.SIGKILL)


def _signal_group(server: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(server.pid, sig)
    except ProcessLookupError:
        pass
