"""`leakpipe ui`: the MLflow server on the project's store lists the pipeline's runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from mlflow import MlflowClient

from leakpipe import tracking
from leakpipe.cli import build_parser, main
from tests.helpers_detector import copied_store, restore_logging

STARTUP_S = 60.0      # bounded wait for the server to answer
POLL_S = 0.5
STOP_S = 10.0
HOST = "127.0.0.1"

_keep_logging = pytest.fixture(autouse=True)(restore_logging)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def _wait_for(url: str, body: dict, server: subprocess.Popen) -> dict:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the UI server exited with {server.returncode}")
        try:
            return _post(url, body)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(POLL_S)
    pytest.fail(f"the UI server did not answer within {STARTUP_S:.0f} s")


def _start_ui(root: Path, uri: str, port: int, output: Any = subprocess.DEVNULL
              ) -> subprocess.Popen:
    """`leakpipe ui` on ``uri`` in a session of its own (so a test can end what it started);
    its stdout and stderr, in the order written, to ``output``."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "DVC_ROOT": str(root),
           "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "leakpipe.cli", "ui", "--port", str(port)],
                            cwd=root, env=env, start_new_session=True,
                            stdout=output, stderr=subprocess.STDOUT)


def _stop(server: subprocess.Popen) -> None:
    """End the server and its workers: the process group this test started."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(STOP_S)


def test_defaults_bind_to_localhost() -> None:
    args = build_parser().parse_args(["ui"])
    assert (args.host, args.port) == ("127.0.0.1", 5000)


def test_the_runs_page_url_names_the_project_experiment(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from leakpipe.tracking.server import runs_page

    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    # MLflow 3.17's UI opens in the browser's stored mode (GenAI by default) unless the URL
    # names one: both pages open in model-training mode
    mode = "workflowType=machine_learning"
    assert runs_page(uri, HOST, 5000) == f"http://{HOST}:5000/#/?{mode}"   # no runs yet
    with tracking.start_run("build"):
        pass
    experiment = MlflowClient(uri).get_experiment_by_name(tracking.DEFAULT_EXPERIMENT)
    assert runs_page(uri, HOST, 5000) == (
        f"http://{HOST}:5000/#/experiments/{experiment.experiment_id}/runs?{mode}")


def test_the_ui_server_runs_no_job_consumers_unless_the_user_asks() -> None:
    from leakpipe.tracking.server import ui_environment
    assert ui_environment({})["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    mine = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true", "PATH": "/bin"}
    assert ui_environment(mine) == mine


def test_remote_tracking_starts_nothing(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("server started"))
    assert main(["ui"]) == 0
    assert "http://mlflow.example:5000" in capsys.readouterr().out


def test_a_tracking_password_is_never_printed(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://ml:s3cr@t@mlflow.example:5000")
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("server started"))
    assert main(["ui"]) == 0
    out = capsys.readouterr().out
    assert "https://***@mlflow.example:5000" in out and "s3cr" not in out
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql://ml:s3cr@db.example:5432/mlflow")
    assert tracking.shown_tracking_uri() == "postgresql+psycopg://***@db.example:5432/mlflow"


@pytest.mark.slow
def test_ui_lists_the_runs_of_a_pipeline_and_stops_on_sigterm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    run_ids = {}
    for stage in ("build", "evaluate"):
        with tracking.start_run(stage) as run:
            run.log_metrics({f"{stage}/seconds": 1.0})
        run_ids[stage] = run.run_id
    port = _free_port()
    said = tmp_path / "ui.out"
    with said.open("w") as output:
        server = _start_ui(tmp_path, uri, port, output)
    try:
        base = f"http://{HOST}:{port}/api/2.0/mlflow"
        found = _wait_for(f"{base}/experiments/search", {"max_results": 10}, server)
        experiment = next(e for e in found["experiments"]
                          if e["name"] == tracking.DEFAULT_EXPERIMENT)
        runs = _post(f"{base}/runs/search", {"experiment_ids": [experiment["experiment_id"]]})
        bound = _listening_addresses(port)
        # SIGTERM to the command only (as `kill PID` does) ends the server and its workers
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait(STOP_S + 5.0) == 128 + signal.SIGTERM
        deadline = time.monotonic() + STOP_S
        while _port_open(port) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        assert not _port_open(port), "the MLflow server still serves after `leakpipe ui` ended"
    finally:
        _stop(server)
    assert bound and bound <= {"127.0.0.1"}, bound     # started without --host: loopback only
    # the first address it names is the runs page (the bare one opens MLflow's GenAI page)
    first = next(line for line in said.read_text().splitlines() if "http://" in line)
    assert first.startswith("ui: the pipeline's runs: ") and "/experiments/" in first, first
    listed = {r["info"]["run_id"]: r for r in runs["runs"]}
    assert set(listed) == set(run_ids.values())
    tags = {t["key"]: t["value"] for t in listed[run_ids["evaluate"]]["data"]["tags"]}
    assert tags[tracking.TAG_STAGE] == "evaluate"


def _listening_addresses(port: int) -> set[str]:
    """The local addresses that listen on ``port`` (every process of this machine)."""
    return {c.laddr.ip for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((HOST, port)) == 0

