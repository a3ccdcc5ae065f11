"""SIGINT / SIGTERM during training: finish the step, checkpoint, stop with 128 + signal.

``GracefulStop`` (a context manager) replaces the two handlers with one that only records the
signal; ``fit`` polls ``requested()`` between optimizer steps, writes a checkpoint (mid-epoch:
with the batch source's position) and raises ``StopRequested``. Being a ``KeyboardInterrupt``,
it closes the MLflow run as KILLED (``tracking.start_run``); the command exits with
``exit_code`` (130 for SIGINT, 143 for SIGTERM). A second signal while stopping restores the
default handlers and interrupts at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

log = logging.getLogger(__name__)

HANDLED = (signal.SIGINT, signal.SIGTERM)
SIGNAL_EXIT_BASE = 128   # shell convention: exit status of a process ended by signal N


class StopRequested(KeyboardInterrupt):
    """Training stopped on request after writing ``checkpoint``."""

    def __init__(self, message: str, checkpoint: Path | None = None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


class GracefulStop:
    """Turn SIGINT / SIGTERM into a flag while active (main thread only; else inert)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in HANDLED}
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # No logging here: the handler may run inside a logging call of the main thread.
        if self.signum is not None:
            self._restore()
            raise KeyboardInterrupt
        self.signum = signum

    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def exit_code(self) -> int:
        """128 + the signal number (130 for SIGINT, 143 for SIGTERM); 130 when none came."""
        return SIGNAL_EXIT_BASE + (self.signum if self.signum is not None else signal.SIGINT)
