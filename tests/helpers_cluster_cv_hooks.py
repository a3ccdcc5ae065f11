"""A `dask worker` preload for tests/test_cluster_cv.py only: a crossval task held on request.

The workers get this file through Dask's config (``DASK_DISTRIBUTED__WORKER__PRELOAD``) and
the control folder through ``CONTROL_ENV``. A task of fold N and method group G, when the file
``hold-N-G`` exists in that folder, first writes its worker's pid to ``pid-N-G`` there, then
waits while ``hold-N-G`` exists (at most ``HOLD_S``): a test can SIGKILL that worker mid-task,
or end the run's driver while the fold is unfinished, then remove the file to let it go.
leakpipe has no such hook: this patches ``leakpipe.cv.tasks.run_group`` in the worker processes
it is preloaded into (the task arrives by that name), never in the test process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

CONTROL_ENV = "LEAKPIPE_TEST_CV_CONTROL"
HOLD_S = 60.0


def dask_setup(worker: Any) -> None:  # noqa: ARG001  (distributed's preload entry point)
    import leakpipe.cv.tasks as tasks

    original = tasks.run_group

    def hooked(items: list[Any]) -> Any:
        task = items[0]
        name = f"{task.fold.index + 1}-{task.group}"
        control = Path(os.environ[CONTROL_ENV])
        hold = control / f"hold-{name}"
        if hold.exists():
            tmp = control / f".pid-{name}.tmp"
            tmp.write_text(str(os.getpid()))
            tmp.replace(control / f"pid-{name}")     # whole, for the test that reads it
            deadline = time.monotonic() + HOLD_S
            while hold.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return original(items)

    tasks.run_group = hooked
