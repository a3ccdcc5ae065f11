"""leakpipe.features.pool: build's recordings over processes, the caller one of them."""

from __future__ import annotations

import os
import time

import pytest

from leakpipe.features.pool import AHEAD, CHUNK, _shared, ordered_map


def _late_square(task: int) -> tuple[int, int]:
    """Even tasks finish later than odd ones: helpers complete out of task order."""
    time.sleep(0.004 if task % 2 == 0 else 0.0)
    return task * task, os.getpid()


def _fails_on_seven(task: int) -> int:
    if task == 7:
        raise ValueError("task 7")
    return task


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_results_come_in_task_order(workers: int) -> None:
    tasks = list(range(10 * CHUNK * workers + 3))  # a last chunk shorter than CHUNK
    results = list(ordered_map(_late_square, tasks, workers))
    assert [square for square, _ in results] == [t * t for t in tasks]
    pids = {pid for _, pid in results}
    assert os.getpid() in pids  # the caller computes while its helpers start
    assert len(pids) <= workers


def test_one_task_runs_here_however_many_workers() -> None:
    assert list(ordered_map(_late_square, [3], 4)) == [(9, os.getpid())]
    assert list(ordered_map(_late_square, [], 2)) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_in_any_process_reaches_the_caller(workers: int) -> None:
    with pytest.raises(ValueError, match="task 7"):
        list(ordered_map(_fails_on_seven, list(range(40)), workers))


class _Later:
    """A stand-in AsyncResult that turns ready after ``polls`` looks: a slow helper."""

    def __init__(self, values: list, polls: int) -> None:
        self.values, self.polls = values, polls

    def ready(self) -> bool:
        self.polls -= 1
        return self.polls < 0

    def wait(self) -> None:
        self.polls = -1

    def get(self) -> list:
        return self.values


class _SlowPool:
    """A pool whose chunks take ``polls`` looks each; records which tasks it was handed."""

    def __init__(self, polls: int) -> None:
        self.polls, self.handed = polls, []

    def apply_async(self, fn):  # noqa: ANN001, ANN201
        return _Later(fn(), 3)  # helpers report ready after a few looks

    def map_async(self, fn, tasks, chunksize):  # noqa: ANN001, ANN201, ARG002
        self.handed.extend(tasks)
        return _Later([fn(t) for t in tasks], self.polls)


@pytest.mark.parametrize("polls", [0, 1, 5, 50])
def test_slow_helpers_keep_the_order_and_bound_what_waits(polls: int) -> None:
    helpers, computed, lag = 2, [], []
    pool = _SlowPool(polls)
    tasks = list(range(200))
    out = []
    for value in _shared(pool, helpers, lambda t: computed.append(t) or -t, tasks):
        out.append(value)
        lag.append(len(computed) - len(out))  # computed, not yet consumed
    assert out == [-t for t in tasks]
    assert pool.handed and len(pool.handed) < len(tasks)  # both the helpers and the caller
    assert max(lag) <= 2 * AHEAD * helpers * CHUNK
