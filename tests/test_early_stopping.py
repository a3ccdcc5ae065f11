"""EarlyStopping and BestTracker: tables of metric sequences -> the epoch that stops."""

from __future__ import annotations

import math

import pytest

from leakpipe.train.early_stopping import BestTracker, EarlyStopping

NAN = math.nan


def _stop_epoch(stopper: EarlyStopping, values: list[float]) -> int | None:
    for epoch, value in enumerate(values):
        stop, _ = stopper.step(value)
        if stop:
            return epoch
    return None


@pytest.mark.parametrize(("mode", "patience", "min_delta", "values", "expected"), [
    ("max", 2, 0.0, [0.5, 0.6, 0.7, 0.8], None),               # always improving
    ("max", 2, 0.0, [0.5, 0.6, 0.6, 0.6], 3),                  # equal is no improvement
    ("max", 1, 0.0, [0.5, 0.4], 1),
    ("max", 3, 0.0, [0.5, 0.4, 0.45, 0.55, 0.5, 0.5, 0.5], 6),  # improvement resets the wait
    ("max", 2, 0.01, [0.5, 0.505, 0.509], 2),                  # below min_delta
    ("max", 2, 0.01, [0.5, 0.52, 0.53, 0.545], None),          # each beats the best by > 0.01
    ("min", 3, 0.0, [1.0, 0.9, 0.95, 0.8, 0.85, 0.85, 0.85], 6),
    ("min", 2, 0.1, [1.0, 0.95, 0.85, 0.84, 0.8], 4),         # improvements need > 0.1
    ("max", 2, 0.0, [0.5, NAN, NAN], 2),                       # NaN is the worst score
    ("min", 2, 0.0, [NAN, 1.0, NAN, 0.5], None),               # NaN first, then improvements
    ("max", 1, 0.0, [NAN], 0),
])
def test_stop_epoch_table(mode: str, patience: int, min_delta: float, values: list[float],
                          expected: int | None) -> None:
    stopper = EarlyStopping("val/clip_f1", mode, patience, min_delta)
    assert _stop_epoch(stopper, values) == expected


def test_reason_names_monitor_best_and_wait() -> None:
    stopper = EarlyStopping("val/clip_f1", "max", 2)
    stopper.step(0.9)
    assert stopper.step(0.8) == (False, "val/clip_f1 = 0.8, no improvement for 1 epochs")
    stop, reason = stopper.step(0.85)
    assert stop
    assert reason.startswith("val/clip_f1 did not improve for 2 epochs (best 0.9, mode max")


@pytest.mark.parametrize("split", [1, 2, 3])
def test_state_dict_resume_decides_like_an_uninterrupted_run(split: int) -> None:
    values = [0.3, 0.5, 0.5, 0.6, 0.55, 0.55, 0.55, 0.7]
    whole = EarlyStopping("m", "max", 3, 0.01)
    expected = [whole.step(v) for v in values]
    first = EarlyStopping("m", "max", 3, 0.01)
    got = [first.step(v) for v in values[:split]]
    second = EarlyStopping("m", "max", 3, 0.01)
    second.load_state_dict(first.state_dict())
    got += [second.step(v) for v in values[split:]]
    assert got == expected


def test_bad_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="mode must be"):
        EarlyStopping("m", "maximum", 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "values", "best_epoch"), [
    ("max", [0.5, 0.7, 0.7, 0.6], 1),          # ties keep the earlier epoch
    ("min", [1.0, 0.5, 0.8, 0.4], 3),
    ("max", [NAN, 0.1, NAN], 1),
    ("max", [NAN, NAN], -1),                   # nothing valid: no best epoch
])
def test_best_tracker_table(mode: str, values: list[float], best_epoch: int) -> None:
    tracker = BestTracker(mode)
    for epoch, value in enumerate(values):
        tracker.update(value, epoch)
    assert tracker.best_epoch == best_epoch


def test_best_tracker_round_trips() -> None:
    tracker = BestTracker("min")
    assert tracker.update(0.5, 0) and not tracker.update(0.6, 1)
    restored = BestTracker("min")
    restored.load_state_dict(tracker.state_dict())
    assert (restored.best, restored.best_epoch) == (0.5, 0)
    assert restored.update(0.4, 2)
