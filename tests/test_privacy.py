"""leakpipe contacts nothing but this machine, and its servers end with it (issue #23, defect 9).

The traced tests run real leakpipe processes (a stage, `leakpipe ui`, `leakpipe serve`) with a
network tracer: a ``sitecustomize`` on ``PYTHONPATH`` that installs an audit hook
(``sys.addaudithook``) in every Python process of the tree -- leakpipe, ``mlflow server`` /
``mlflow models serve`` and their uvicorn workers -- and appends each ``socket.getaddrinfo`` /
``gethostbyname`` (a name lookup: DNS) and ``socket.connect`` / ``sendto`` (an address) to a
log. It sees the lookup even on a machine without a network, where a connection would never
be made; strace would only see the resolver's packets, whose names it does not decode. Every
process leakpipe starts is Python, so the hook covers them all.

The children get this environment without the tools' opt-out variables and without the
markers MLflow reads as "CI or a test run" (``PYTEST_CURRENT_TEST``, ``CI``, ...), under which
it switches telemetry off by itself: so it is leakpipe alone that keeps them quiet.

The server tests then SIGKILL the leakpipe process (no handler runs) and expect its server to
be gone within seconds (defect 9): the guard of ``leakpipe.tracking.guard`` stops it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

import leakpipe
from leakpipe.serve.server import default_model
from leakpipe.tracking.server import STOP_TIMEOUT_S
from tests.helpers_detector import copied_store
from tests.helpers_h5 import write_splits
from tests.test_serve import NAME, Served, _records, served  # noqa: F401 (the fixture)
from tests.test_ui import HOST, STOP_S, _free_port, _port_open, _wait_for

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
GONE_S = STOP_TIMEOUT_S + 5.0   # a SIGKILLed leakpipe's server group is gone by then
POLL_S = 0.2
# what MLflow's telemetry takes as CI or a test run (mlflow.telemetry.utils), and DVC's own
# test switch: none of them may quiet the children in place of leakpipe
QUIETING = ("PYTEST_CURRENT_TEST", "CI", "GITHUB_ACTIONS", "CIRCLECI", "GITLAB_CI",
            "JENKINS_URL", "TRAVIS", "TF_BUILD", "BITBUCKET_BUILD_NUMBER", "CODEBUILD_BUILD_ARN",
            "BUILDKITE", "TEAMCITY_VERSION", "CLOUD_RUN_EXECUTION", "RUNBOT_HOST_URL",
            "RUNBOT_BUILD_NAME", "RUNBOT_WORKER_ID", "DO_NOT_TRACK", "DVC_TEST",
            leakpipe.TELEMETRY_OPT_IN, *leakpipe.TELEMETRY_OPT_OUTS)
LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "",
               socket.gethostname()}

SITECUSTOMIZE = '''\
"""Test tracer: log every name lookup and outbound address of this process."""
import os
import sys

_LOG = os.environ.get("LEAKPIPE_TEST_NETLOG")
_EVENTS = {"socket.getaddrinfo": "lookup", "socket.gethostbyname": "lookup",
           "socket.gethostbyaddr": "lookup", "socket.connect": "connect",
           "socket.sendto": "connect", "socket.sendmsg": "connect"}


def _hook(event, args):
    kind = _EVENTS.get(event)
    if kind is None:
        return
    target = args[0] if kind == "lookup" else args[1]
    if isinstance(target, bytes):
        target = target.decode("ascii", "replace")
    host = target[0] if isinstance(target, tuple) else target
    # connections: an (address, port, ...) tuple is IP; a path (Unix) or netlink is local
    inet = kind == "lookup" or (isinstance(host, str) and isinstance(target, tuple))
    host = "" if host is None else host      # getaddrinfo(None, port): a local bind
    family = "inet" if inet else "local"
    line = f"{os.getpid()}\\t{kind}\\t{family}\\t{host}\\t{event}\\n"
    with open(_LOG, "a", encoding="utf-8") as out:
        out.write(line)


if _LOG:
    sys.addaudithook(_hook)
'''


# -- the opt-out itself ----------------------------------------------------------------------


def test_unset_opt_outs_are_filled_in() -> None:
    env: dict[str, str] = {}
    assert leakpipe.apply_telemetry_opt_outs(env) == dict(leakpipe.TELEMETRY_OPT_OUTS)
    assert env["MLFLOW_DISABLE_TELEMETRY"] == "true" and env["DVC_NO_ANALYTICS"] == "1"


def test_a_tools_own_setting_is_kept() -> None:
    env = {"MLFLOW_DISABLE_TELEMETRY": "false"}
    leakpipe.apply_telemetry_opt_outs(env)
    assert env["MLFLOW_DISABLE_TELEMETRY"] == "false"
    assert env["DVC_NO_ANALYTICS"] == "1"


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_leakpipe_telemetry_opts_in_to_every_tools_default(value: str) -> None:
    env = {leakpipe.TELEMETRY_OPT_IN: value}
    assert leakpipe.apply_telemetry_opt_outs(env) == {}
    assert env == {leakpipe.TELEMETRY_OPT_IN: value}


def test_importing_leakpipe_turns_mlflow_and_dvc_reporting_off(tmp_path: Path) -> None:
    """In a fresh interpreter with neither tool told anything: after ``import leakpipe``,
    MLflow's and DVC's own checks say off (DVC's in a repository whose config allows it).

    MLflow's CI / test-run detection (private, ``_is_ci_env_or_testing``) must say no in this
    environment, or MLflow would be off by itself here and the traced tests below would prove
    nothing: it is the environment they all use."""
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("")
    code = ("import leakpipe\n"
            "from mlflow.telemetry import utils\n"
            "from dvc.analytics import is_enabled\n"
            "print(utils._is_ci_env_or_testing(), utils.is_telemetry_disabled(), is_enabled())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_quiet_free_env(),
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True", "False"]


# -- traced processes ------------------------------------------------------------------------


@pytest.fixture
def tracer(tmp_path: Path) -> Path:
    """A folder with the tracing ``sitecustomize``; its log is ``<folder>/net.log``."""
    folder = tmp_path / "tracer"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    probe = subprocess.run([sys.executable, "-c", "import socket; socket.getaddrinfo("
                            "'localhost', 1)"], env=_traced_env(folder, {}), timeout=60,
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0 or "localhost" not in _log(folder):
        pytest.skip(f"the audit-hook tracer does not run here: {probe.stderr.strip()[-200:]}")
    (folder / "net.log").unlink()
    return folder


def _quiet_free_env() -> dict[str, str]:
    """This environment without anything that quiets MLflow or DVC besides leakpipe."""
    return {k: v for k, v in os.environ.items() if k not in QUIETING}


def _traced_env(tracer: Path, extra: Mapping[str, str]) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(tracer), os.environ.get("PYTHONPATH")) if p)
    return {**_quiet_free_env(), "PYTHONPATH": path,
            "LEAKPIPE_TEST_NETLOG": str(tracer / "net.log"), **extra}


def _log(tracer: Path) -> str:
    path = tracer / "net.log"
    return path.read_text() if path.exists() else ""


def _outside(tracer: Path) -> list[str]:
    """The logged lookups of a name that is not this machine's and connections to an address
    that is not loopback (Unix and netlink sockets are local)."""
    found = []
    for line in _log(tracer).splitlines():
        pid, _kind, family, host, event = line.split("\t")
        if family == "local" or _is_local(host):
            continue
        found.append(f"{event} {host} (pid {pid})")
    return sorted(set(found))


def _is_local(host: str) -> bool:
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


@pytest.mark.slow
def test_a_stage_contacts_nothing(tracer: Path, tmp_path: Path) -> None:
    """`preload` as DVC runs it (``python stages/preload.py``): MLflow imported and a tracked
    run, on a tiny data set (without leakpipe's opt-out it looks up config.mlflow-telemetry.io).
    """
    data = tmp_path / "data"
    write_splits(data)
    env = _traced_env(tracer, {"MLFLOW_TRACKING_URI": copied_store(tmp_path / "mlruns"),
                               "DVC_ROOT": str(tmp_path)})
    done = subprocess.run(
        [sys.executable, str(REPO / "stages" / "preload.py"), "--params", str(PARAMS),
         "--data-dir", str(data), "--report", str(tmp_path / "preload.json")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _outside(tracer) == []


@pytest.mark.slow
def test_ui_contacts_nothing_and_dies_with_a_killed_leakpipe(tracer: Path,
                                                            tmp_path: Path) -> None:
    """`leakpipe ui` with a browser's telemetry question (``GET ui-telemetry``, which makes
    the server fetch its UI config); then SIGKILL to leakpipe leaves no server behind."""
    port = _free_port()
    env = _traced_env(tracer, {"MLFLOW_TRACKING_URI": copied_store(tmp_path / "mlruns"),
                               "DVC_ROOT": str(tmp_path)})
    with _started([sys.executable, "-m", "leakpipe.cli", "ui", "--port", str(port)],
                  tmp_path, env) as leakpipe_ui:
        base = f"http://{HOST}:{port}"
        _wait_for(f"{base}/api/2.0/mlflow/experiments/search", {"max_results": 1}, leakpipe_ui)
        with urllib.request.urlopen(f"{base}/ajax-api/3.0/mlflow/ui-telemetry",
                                    timeout=10) as response:
            assert json.loads(response.read())["disable_ui_telemetry"] is True
        _assert_dies_with(leakpipe_ui, port)
    assert _outside(tracer) == []


@pytest.mark.slow
def test_serve_contacts_nothing_and_dies_with_a_killed_leakpipe(
        tracer: Path, served: Served) -> None:  # noqa: F811 (the imported fixture)
    """`leakpipe serve` of the registered champion answers a recording; then SIGKILL."""
    port = _free_port()
    env = _traced_env(tracer, {"MLFLOW_TRACKING_URI": served.store,
                               "DVC_ROOT": str(served.root)})
    command = [sys.executable, "-m", "leakpipe.cli", "serve", "--model", default_model(NAME),
               "--port", str(port)]
    with _started(command, served.root, env) as leakpipe_serve:
        body = {"dataframe_records": _records(served.wavs[:1])}
        answer = _wait_for(f"http://{HOST}:{port}/invocations", body, leakpipe_serve)
        assert answer["predictions"][0]["status"] == "ok"
        _assert_dies_with(leakpipe_serve, port)
    assert _outside(tracer) == []


@contextmanager
def _started(command: list[str], cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """A leakpipe command in a session of its own. Afterwards every process that still carries
    this test's tracer log in its environment is killed: the test's own clean-up, whatever the
    outcome, found without relying on the process tree under test."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        marker = env["LEAKPIPE_TEST_NETLOG"]
        for p in psutil.process_iter():
            try:
                if p.environ().get("LEAKPIPE_TEST_NETLOG") == marker:
                    p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        proc.wait(STOP_S)


def _assert_dies_with(proc: subprocess.Popen, port: int) -> None:
    """SIGKILL ``proc`` alone (not its group): within GONE_S its server processes are gone and
    ``port`` is free."""
    servers = psutil.Process(proc.pid).children(recursive=True)
    assert servers, "no server process under leakpipe"
    proc.kill()
    proc.wait(STOP_S)
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline and (_alive(servers) or _port_open(port)):
        time.sleep(POLL_S)
    assert not _alive(servers), f"still running after leakpipe was killed: {_alive(servers)}"
    assert not _port_open(port), f"port {port} still served after leakpipe was killed"


def _alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {' '.join(p.cmdline()[:4])}")
        except psutil.NoSuchProcess:
            pass
    return out
