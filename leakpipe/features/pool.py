"""Features of many recordings in parallel, in input order, with the calling process as a worker.

``ordered_map(fn, tasks, workers)`` is ``map(fn, tasks)`` spread over ``workers`` processes:
the calling process and ``workers - 1`` spawned helpers. The caller (build) also consumes the
results (it writes the HDF5 rows), so a pool of ``workers`` helpers would make it a third
process on a 2-core machine, idle while it waits and competing with the helpers while it
writes; and each helper first spends about 2 s importing numpy / scipy, during which nothing
would be computed. Here the caller computes while the helpers start (it hands them work only
once they report ready) and whenever no finished result is waiting to be consumed, so every
core computes from the first second on, and the writes take no core of their own.

Results come back in task order whoever computed them. Memory stays bounded: at most
``AHEAD`` chunks per helper are handed out and at most as many results the caller computed
itself wait behind the oldest unfinished chunk.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.pool import AsyncResult, Pool
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

CHUNK = 4   # tasks per hand-out to a helper: one round trip per chunk
AHEAD = 2   # chunks handed out per helper: the next one is queued while it works on one


def ordered_map(fn: Callable[[T], R], tasks: Sequence[T], workers: int,
                initializer: Callable[[], None] | None = None) -> Iterator[R]:
    """``fn(task)`` for every task, yielded in task order, over ``workers`` processes.

    ``fn`` and ``initializer`` must be importable (module-level) functions: helpers are
    spawned (no fork of the caller's MLflow / HDF5 state) and run ``initializer`` first, then
    their tasks. With ``workers <= 1`` (or a single task) everything runs here.
    """
    helpers = min(workers, len(tasks)) - 1
    if helpers < 1:
        yield from map(fn, tasks)
        return
    with multiprocessing.get_context("spawn").Pool(helpers, initializer=initializer) as pool:
        yield from _shared(pool, helpers, fn, tasks)


def _ready() -> bool:
    """A helper's first task: done once its initializer has run (its imports are in)."""
    return True


def _shared(pool: Pool, helpers: int, fn: Callable[[T], R],
            tasks: Sequence[T]) -> Iterator[R]:
    """Hand chunks to ready helpers, compute here in between, yield in task order."""
    started = [pool.apply_async(_ready) for _ in range(helpers)]
    slots: deque[AsyncResult | list[R]] = deque()  # consecutive runs of tasks, in task order
    handed = local = 0   # chunks out at helpers; results computed here waiting in slots
    limit = AHEAD * helpers
    i = 0                # next task not yet given to anyone
    while i < len(tasks) or slots:
        if started and all(s.ready() for s in started):
            started = []  # every helper is up: from now on they get chunks
        while not started and i < len(tasks) and handed < limit:
            slots.append(pool.map_async(fn, tasks[i:i + CHUNK], chunksize=CHUNK))
            i, handed = i + min(CHUNK, len(tasks) - i), handed + 1
        head = slots[0] if slots else None
        if isinstance(head, list):
            slots.popleft()
            local -= len(head)
            yield from head
        elif head is not None and head.ready():
            slots.popleft()
            handed -= 1
            yield from head.get()
        elif i < len(tasks) and local < limit * CHUNK:
            slots.append([fn(tasks[i])])  # nothing to consume yet: compute one here
            i, local = i + 1, local + 1
        else:
            head.wait()  # type: ignore[union-attr]  # slots is not empty here
