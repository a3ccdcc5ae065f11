"""An expensive test input built once per test session, shared by every pytest-xdist worker.

`make test` runs modules on two workers (``--dist loadfile``); a session- or module-scoped
fixture is still built once per worker or per module. ``built_once`` builds into a folder of
the session's base temporary folder that all workers share (the parent of a worker's own),
under an exclusive lock: the first caller builds and records what it made, later callers (any
worker, any module) wait for the lock and read the record. A build that raises records nothing,
so the next caller builds again and fails in its own test.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

RECORD = "built.json"


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's folder that every worker sees: under xdist the parent of this worker's
    base temporary folder (``.../pytest-N/popen-gw0`` -> ``.../pytest-N``), else the base
    temporary folder itself (its parent is shared by other sessions)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``build(folder)``'s JSON-able record, ``build`` run at most once per session for
    ``name`` (its empty folder under ``shared_root``)."""
    folder = shared_root(tmp_path_factory) / f"shared-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / RECORD
    with (folder.parent / f"shared-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # released when the file closes
        if record.is_file():
            return json.loads(record.read_text())
        work = folder / "work"
        if work.exists():                       # an earlier build that raised: start clean
            shutil.rmtree(work)
        work.mkdir()
        made = build(work)
        record.write_text(json.dumps(made))
        return made
