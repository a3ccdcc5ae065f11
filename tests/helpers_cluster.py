"""Real Dask processes for the cluster tests: a `dask scheduler` and `dask worker` on
127.0.0.1 with random ports, as docs/scale-out.md starts them, stopped by their own ids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent
HOOKS = Path(__file__).with_name("helpers_cluster_hooks.py")
LOOPBACK = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]  # HTTP too: no 0.0.0.0
START_S = 60
# A nanny restarts a dead worker as a new process: forked from a server that has distributed
# imported already, in a second instead of three (spawn, Dask's default, re-imports it all)
FAST_RESTART = {"DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "forkserver"}


def _start(args: list[str], log: Path, env: Mapping[str, str] | None) -> subprocess.Popen:
    """A process in its own session (so that its nanny's workers stop with it)."""
    with log.open("ab") as out:
        return subprocess.Popen([str(BIN / "dask"), *args], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group this test started (a nanny and its workers), then
    SIGKILL to what is left after a few seconds."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def scheduler(tmp: Path, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """`dask scheduler` on a random loopback port; yields its address."""
    info = tmp / "scheduler.json"
    proc = _start(["scheduler", *LOOPBACK, "--port", "0", "--scheduler-file", str(info)],
                  tmp / "scheduler.log", env)
    try:
        deadline = time.monotonic() + START_S
        while not info.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert info.exists(), (tmp / "scheduler.log").read_text()[-3000:]
        time.sleep(0.05)  # the file is written in one go, but read it whole
        yield json.loads(info.read_text())["address"]
    finally:
        stop(proc)


@contextmanager
def workers(address: str, tmp: Path, n: int, *, hooks: bool = False, nanny: bool = True,
            env: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """`dask worker ADDRESS --nworkers n --nthreads 1`, with the test hooks preloaded when
    ``hooks`` (tests/helpers_cluster_hooks.py); waits until all ``n`` have joined."""
    args = ["worker", address, "--nworkers", str(n), "--nthreads", "1", *LOOPBACK,
            "--death-timeout", "60", *(["--preload", str(HOOKS)] if hooks else []),
            *([] if nanny else ["--no-nanny"])]
    proc = _start(args, tmp / f"workers-{time.monotonic_ns()}.log", {**FAST_RESTART, **(env or {})})
    try:
        wait_for_workers(address, n)
        yield proc
    finally:
        stop(proc)


def wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout=START_S, set_as_default=False) as client:
        client.wait_for_workers(n, timeout=START_S)
