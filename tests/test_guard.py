"""The server guard (defect 9): a server's group ends with the process that started it.

Cheap stand-ins for the servers (``sleep``; a shell that ignores SIGTERM), so the mechanism is
checked in about a second; tests/test_privacy.py SIGKILLs real `leakpipe ui` / `leakpipe serve`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from leakpipe.tracking.guard import guarded

GONE_S = 5.0
POLL_S = 0.1
# a stand-in "leakpipe": starts the guarded server in a session of its own, says the guard's
# pid, then waits to be killed
STARTER = """\
import subprocess, sys, time
from leakpipe.tracking.guard import guarded
stop_s, command = float(sys.argv[1]), sys.argv[2:]
guard = subprocess.Popen(guarded(command, stop_s), start_new_session=True)
print(guard.pid, flush=True)
time.sleep(600)
"""


def test_the_guard_exits_as_its_server_did() -> None:
    exits = [sys.executable, "-c", "raise SystemExit(3)"]
    assert subprocess.run(guarded(exits, 1.0), timeout=60).returncode == 3
    killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    assert subprocess.run(guarded(killed, 1.0), timeout=60).returncode == -signal.SIGTERM


def test_a_stop_signal_to_the_group_leaves_the_guard_waiting_for_its_server() -> None:
    """leakpipe's normal stop: SIGTERM to the whole group; the guard reports the server's end."""
    guard = subprocess.Popen(guarded(["sleep", "60"], 5.0), start_new_session=True)
    try:
        server = _children(guard.pid)[0]
        os.killpg(guard.pid, signal.SIGTERM)
        assert guard.wait(GONE_S) == -signal.SIGTERM      # sleep died of SIGTERM, so does it
        assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    finally:
        guard.kill()
        guard.wait()


@pytest.mark.parametrize("server", [["sleep", "60"], ["sh", "-c", "trap '' TERM; sleep 60"]],
                         ids=["stops-on-sigterm", "ignores-sigterm"])
def test_a_killed_starter_takes_the_guarded_group_with_it(server: list[str]) -> None:
    """SIGKILL to the starter: the guard notices, SIGTERMs its group and, after its stop time
    (1 s here), SIGKILLs what is left."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER, "1.0", *server],
                               stdout=subprocess.PIPE, text=True)
    group: list[psutil.Process] = []
    try:
        guard = psutil.Process(int(starter.stdout.readline()))
        group = [guard, *_children(guard.pid)]
        starter.kill()
        starter.wait()
        deadline = time.monotonic() + GONE_S
        while _alive(group) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        assert _alive(group) == []
    finally:
        starter.kill()
        starter.wait()
        starter.stdout.close()
        for p in _alive(group):
            p.kill()


def _children(pid: int) -> list[psutil.Process]:
    """The process's descendants once it has started one (it takes an interpreter start)."""
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        found = psutil.Process(pid).children(recursive=True)
        if found:
            return found
        time.sleep(POLL_S)
    pytest.fail(f"process {pid} started no child within 30 s")


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out
