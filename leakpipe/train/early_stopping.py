"""Early stopping and best-checkpoint choice as small state machines (Lightning-style).

``EarlyStopping.step(value)`` is the one decision: it returns (stop, reason). NaN is the worst
possible score: it never improves and counts towards the patience. Both classes round-trip
through ``state_dict`` / ``load_state_dict`` so a resumed run decides exactly as an
uninterrupted one.
"""

from __future__ import annotations

import math
from typing import Any, Literal

Mode = Literal["min", "max"]


def _worst(mode: Mode) -> float:
    return math.inf if mode == "min" else -math.inf


def improves(value: float, best: float, mode: Mode, min_delta: float = 0.0) -> bool:
    """True when ``value`` beats ``best`` by more than ``min_delta``; NaN never improves."""
    if math.isnan(value):
        return False
    return value < best - min_delta if mode == "min" else value > best + min_delta


class EarlyStopping:
    """Stop after ``patience`` consecutive epochs without an improvement of ``min_delta``."""

    def __init__(self, monitor: str, mode: Mode, patience: int, min_delta: float = 0.0) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self.monitor, self.mode, self.patience = monitor, mode, patience
        self.min_delta = abs(min_delta)
        self.best = _worst(mode)
        self.wait = 0
        self.steps = 0

    def step(self, value: float) -> tuple[bool, str]:
        """Feed one epoch's monitored value; returns (stop, reason)."""
        self.steps += 1
        if improves(value, self.best, self.mode, self.min_delta):
            self.best, self.wait = value, 0
            return False, f"{self.monitor} improved to {value:.6g}"
        self.wait += 1
        if self.wait >= self.patience:
            return True, (f"{self.monitor} did not improve for {self.wait} epochs "
                          f"(best {self.best:.6g}, mode {self.mode}, min_delta {self.min_delta:g})")
        return False, f"{self.monitor} = {value:.6g}, no improvement for {self.wait} epochs"

    def state_dict(self) -> dict[str, Any]:
        return {"monitor": self.monitor, "mode": self.mode, "patience": self.patience,
                "min_delta": self.min_delta, "best": self.best, "wait": self.wait,
                "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.wait, self.steps = float(state["best"]), int(state["wait"]), \
            int(state["steps"])


class BestTracker:
    """The epoch whose monitored value is best so far (strictly better; NaN never best)."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.best = _worst(mode)
        self.best_epoch = -1

    def update(self, value: float, epoch: int) -> bool:
        """Record ``value`` of ``epoch``; True when it is the new best."""
        if not improves(value, self.best, self.mode):
            return False
        self.best, self.best_epoch = value, epoch
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "best": self.best, "best_epoch": self.best_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch = float(state["best"]), int(state["best_epoch"])
