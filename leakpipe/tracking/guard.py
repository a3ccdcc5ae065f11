"""Run a server so that it ends with the leakpipe process that started it, even on SIGKILL.

`leakpipe ui` and `leakpipe serve` run their server in a session of its own, so that a stop
ends the server's whole process group (``leakpipe.tracking.server``). Killed with SIGKILL,
leakpipe gets no chance to do that, and the group -- ``mlflow server`` with its uvicorn, its
job runner and Huey consumers, or ``mlflow models serve`` with its workers -- would keep
running and keep the port. A parent-death signal (Linux ``PR_SET_PDEATHSIG``) on the server
alone would not do: it reaches only the process it is set on, and MLflow's own children do not
all follow theirs.

So the session's leader is this small guard, and the server its child:
``python -I guard.py PARENT_PID STOP_S -- COMMAND...``. It waits for the server and watches its
own parent: when the parent is no longer PARENT_PID (leakpipe died and the guard was
reparented), it stops the whole group as leakpipe would have (SIGTERM, SIGKILL after STOP_S).
A stop signal of the group's own (leakpipe's normal stop) does not end the guard: the server
got it too, and the guard exits with the server's status once it is done, so leakpipe still
sees how its server ended. Polling the parent works on any POSIX system and does not depend on
which thread started the guard.

It imports only the standard library and runs isolated (``-I``): not as part of leakpipe,
whose tracking package would load MLflow for every server start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

POLL_S = 0.2
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
USAGE = "usage: guard.py PARENT_PID STOP_S -- COMMAND..."


def guarded(command: Sequence[str], stop_s: float) -> list[str]:
    """``command`` under a guard that ends its process group when this process dies."""
    return [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), str(stop_s),
            "--", *command]


def main(argv: Sequence[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(f"guard: {USAGE}", file=sys.stderr)
        return 2
    parent, stop_s, command = int(argv[0]), float(argv[1]), list(argv[3:])
    for sig in STOP_SIGNALS:                # the group's stop reaches the server itself
        signal.signal(sig, lambda _signum, _frame: None)
    if os.getppid() != parent:              # leakpipe died before the server started
        return 128 + signal.SIGTERM
    server = subprocess.Popen(command)
    while True:
        try:
            return _exit_like(server.wait(timeout=POLL_S))
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != parent:
            _stop_group(server, stop_s)


def _stop_group(server: subprocess.Popen, stop_s: float) -> None:
    """The orphaned group's end: SIGTERM to all, STOP_S for the server to finish, then
    SIGKILL to whatever is left (this guard included)."""
    os.killpg(0, signal.SIGTERM)
    try:
        server.wait(timeout=stop_s)
    except subprocess.TimeoutExpired:
        pass
    os.killpg(0, signal.SIGKILL)


def _exit_like(code: int) -> int:
    """Exit as the server did: its code, or killed by the same signal."""
    if code >= 0:
        return code
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    return 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
