"""The grid's experiments as queued DVC experiments: queue, run N at a time, wait, collect.

Every call is a ``dvc`` subprocess in the project root, so the study runs exactly what a user
would type: ``dvc exp run --queue -n <cell> -S build.long_window_s=.. ... <target>`` per cell,
``dvc queue start -j N``, ``dvc queue status`` until the cells are done, and
``dvc exp show --json`` for their metrics. Each queued experiment runs in a temporary copy
under ``.dvc/tmp/exps``; its stages still log to the project's one MLflow store
(``tracking.tracking_uri``; tests/test_faults.py checks that queued runs land there).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe.errors import LeakpipeError
from leakpipe.serve.server import scripts_first_env

log = logging.getLogger(__name__)

POLL_S = 5.0                  # between two `dvc queue status` (each costs a DVC start-up)
ACTIVE = ("Queued", "Running")
SUCCESS = "Success"


class StudyError(LeakpipeError):
    """A DVC command of the study failed."""


@dataclass(frozen=True)
class Dvc:
    """``dvc`` in one project: the executable next to this interpreter, and the root."""

    root: Path

    @property
    def env(self) -> dict[str, str]:
        return scripts_first_env()   # `dvc queue start` spawns its workers as ``dvc``

    @property
    def executable(self) -> str:
        here = Path(sys.executable).parent / "dvc"
        return str(here) if here.exists() else "dvc"

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run([self.executable, *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise StudyError(f"dvc {' '.join(args[:3])} failed in {self.root}: {last[0]}")
        return done.stdout

    def start(self, jobs: int) -> None:
        """``dvc queue start -j jobs``: detached workers; its pipes are not kept, or the call
        would only return once the queue is empty."""
        done = subprocess.run([self.executable, "queue", "start", "-j", str(jobs)],
                              cwd=self.root, env=self.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            raise StudyError(f"dvc queue start -j {jobs} failed in {self.root}")


def queue(dvc: Dvc, name: str, sets: Mapping[str, Any], target: str) -> None:
    """Queue one experiment named ``name`` with ``-S key=value`` for each of ``sets``."""
    args = ["exp", "run", "--queue", "--name", name]
    for key, value in sets.items():
        args += ["-S", f"{key}={value}"]
    dvc.run(*args, target)


def queue_status(dvc: Dvc) -> dict[str, str]:
    """Experiment name -> its queue status (Queued, Running, Success, Failed, ...)."""
    out: dict[str, str] = {}
    for line in dvc.run("queue", "status").splitlines():
        cols = line.split()
        if len(cols) >= 3 and cols[0] != "Task":
            out[cols[1]] = cols[-1]
    return out


def wait(dvc: Dvc, names: Iterable[str], timeout_s: float,
         on_change: Callable[[dict[str, str]], None] | None = None) -> dict[str, str]:
    """Poll the queue until none of ``names`` is queued or running; their last statuses."""
    names = set(names)
    deadline = time.monotonic() + timeout_s
    while True:
        status = {k: v for k, v in queue_status(dvc).items() if k in names}
        if on_change is not None:
            on_change(status)
        if not any(v in ACTIVE for v in status.values()):
            return status
        if time.monotonic() > deadline:
            raise StudyError(f"the study's experiments were still running after "
                             f"{timeout_s:.0f} s (dvc queue status; dvc queue kill to stop them)")
        time.sleep(POLL_S)


def failure_note(dvc: Dvc, name: str) -> str:
    """The last error line of a failed experiment's log (``dvc queue logs``)."""
    text = dvc.run("queue", "logs", name, check=False)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("error", "ERROR"))]
    return (errors or lines or ["no log"])[-1][:300]


def head(dvc: Dvc) -> str:
    """The commit the workspace is on (queued experiments derive from it)."""
    return commit(dvc, "HEAD")


def commit(dvc: Dvc, rev: str) -> str:
    done = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=dvc.root,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StudyError(f"{rev}: not a commit of {dvc.root}")
    return done.stdout.strip()


def experiments(dvc: Dvc, metrics_file: str, baseline: str) -> dict[str, dict[str, Any]]:
    """Experiment name -> the ``metrics_file`` it wrote, for the experiments derived from the
    commit ``baseline`` (``dvc exp show --json --rev``: a commit made after queueing does not
    hide them); an experiment without that file maps to {}."""
    out: dict[str, dict[str, Any]] = {}
    for rev in json.loads(dvc.run("exp", "show", "--json", "--rev", baseline) or "[]"):
        for exp in rev.get("experiments") or []:
            for run in exp.get("revs") or []:
                name = run.get("name")
                if not name:
                    continue
                data = (run.get("data") or {}).get("metrics") or {}
                out[name] = (data.get(metrics_file) or {}).get("data") or {}
    return out


def remove(dvc: Dvc, names: Sequence[str]) -> None:
    if names:
        dvc.run("exp", "remove", *names)
