"""A `dask worker --preload` for the cluster tests only: misbehaving recordings, by name.

A recording whose file name holds ``poison`` kills the worker process that reads it
(``os._exit``: as a crash in a decoder would); one whose name holds ``slow`` first writes the
worker's pid to ``<name>.pid`` beside it, then takes ``SLOW_S`` longer, so that a test can
SIGKILL that worker mid-task. leakpipe itself has no such hook: this file patches
``leakpipe.build_recording.process_recording`` in the worker processes it is preloaded into
(tests/helpers_cluster.py starts them), never in the test process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

SLOW_S = 1.5


def dask_setup(worker: Any) -> None:  # noqa: ARG001  (distributed's preload entry point)
    import leakpipe.build_recording as recording

    original = recording.process_recording

    def hooked(job: Any, index: int, path: Path) -> Any:
        name = Path(path).name
        if "poison" in name:
            os._exit(3)
        if "slow" in name:
            tmp = Path(path).with_name(f".{name}.pid.tmp")
            tmp.write_text(str(os.getpid()))
            tmp.replace(Path(path).with_name(f"{name}.pid"))   # whole: the test reads it at once
            time.sleep(SLOW_S)
        return original(job, index, path)

    recording.process_recording = hooked
