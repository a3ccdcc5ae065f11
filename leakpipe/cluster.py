"""Dask distributed as the engine of `build`, `index` and `crossval` beyond one machine
(docs/scale-out.md).

`leakpipe build`, `leakpipe index` and `leakpipe cv` take ``--scheduler ADDRESS`` or, without
the flag, the ``LEAKPIPE_SCHEDULER`` environment variable (so ``LEAKPIPE_SCHEDULER=tcp://head:8786
dvc repro`` needs no change to dvc.yaml). The address is deliberately no DVC param: where a
stage computes must not make it stale, and its outputs are the same either way.

Only this module imports dask / distributed, and only in ``connect``, the session it yields
and the tasks on the workers: without a scheduler neither is loaded (tests/test_cluster.py
checks), so the local path, the default, costs no import and dask is needed only where it is
used.

What it adds to Dask, which already reschedules the tasks of a worker it lost:
- the code check: every worker must run the client's leakpipe (``package_digest``); one that
  does not is refused with one line naming it, at connect time and again by every task (a
  worker may join later);
- the worker setup (run once, by a worker process's first task): one BLAS / OpenMP / torch
  thread, parallelism comes from the workers (``--nthreads 1``); freed memory kept for reuse
  (``_prepared`` says why);
- ``Session.map``: an ordered, bounded map over futures (results come back in input order,
  ``AHEAD`` tasks per worker thread in flight), with a task that killed its worker every time
  (``KilledWorker``) retried item by item, alone, and only then given up as ``on_killed``;
- ``Session.submit`` / ``completed`` / ``result``: single tasks (crossval's, a few dozen, each
  minutes long), optionally needing a worker resource (``GPU``), taken as they finish, a task
  that killed its worker every time raised as one line.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from threadpoolctl import threadpool_limits

from leakpipe.allocator import retain_freed_memory
from leakpipe.code_digest import package_digest
from leakpipe.errors import LeakpipeError

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

SCHEDULER_ENV = "LEAKPIPE_SCHEDULER"
CHUNK = 8               # items per task, one round trip each (bench_build.py --part cluster)
AHEAD = 2               # tasks in flight per worker thread: one running, the next one queued
CONNECT_TIMEOUT_S = 30  # to reach the scheduler
WORKER_WAIT_S = 300     # for a first worker (a batch system may start them minutes later)
REFRESH_S = 2.0         # how often the window follows workers that join or leave


class ClusterError(LeakpipeError):
    """The scheduler cannot be reached, or no worker joined it."""


class CodeMismatch(LeakpipeError):
    """A worker runs other leakpipe code than the client."""


@dataclass(frozen=True)
class ClusterSettings:
    """Where to compute and in what pieces (command-line options, not params: see above)."""

    address: str      # the Dask scheduler, e.g. tcp://head:8786
    chunk: int = CHUNK


def scheduler_address(flag: str | None,
                      environ: Mapping[str, str] = os.environ) -> str | None:
    """The scheduler to use: the flag, else ``LEAKPIPE_SCHEDULER``, else None (the local
    pool). The flag wins even when empty: ``--scheduler ''`` computes here."""
    value = flag if flag is not None else environ.get(SCHEDULER_ENV, "")
    return value.strip() or None


# -- on the workers ----------------------------------------------------------------------------


@functools.cache
def worker_digest() -> str:
    """This process's leakpipe digest (what ``connect`` asks every worker for), computed once:
    reading every source file takes milliseconds, too long for every task."""
    return package_digest()


@functools.cache
def _prepared() -> str:
    """A worker process's set-up, by its first task; returns its digest.

    Threads pinned (``pin_threads``), and freed memory kept for reuse: Dask's nanny starts
    its workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (so that freed memory goes back to the
    OS where its memory monitor sees it), which also pins glibc's mmap threshold at 128 KiB,
    so every numpy temporary above that is mapped and page-faulted in afresh: measured, a
    build recording took 16.2 ms of CPU that way against 7.6 ms with the default and 7.55 ms
    once freed memory is kept. A worker's resident memory then stays at its largest task's
    peak (a few blocks and clips of one recording in build).
    """
    pin_threads()
    retain_freed_memory()
    return worker_digest()


def pin_threads() -> None:
    """One thread for every BLAS / OpenMP pool loaded here, and for torch if it is: a worker
    is one core (``--nthreads 1``), so a pool of threads per task only makes them wait on each
    other (``leakpipe.build_recording.one_blas_thread`` measured it)."""
    threadpool_limits(1)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def worker_name() -> str:
    """The Dask worker this runs in (its address), or the process outside one."""
    from distributed import get_worker  # only reached on a worker, where it is loaded

    try:
        return get_worker().address
    except ValueError:  # not inside a Dask worker (a direct call)
        return f"process {os.getpid()}"


def _checked(fn: Callable[[list[T]], list[R]], items: list[T], digest: str,
             setup: Callable[[], None] | None) -> list[R]:
    """The task every worker runs: refuse other code, set up once, then ``fn(items)``."""
    mine = _prepared()
    if mine != digest:
        raise CodeMismatch(f"Dask worker {worker_name()} runs other leakpipe code (digest "
                           f"{mine[:12]}, the client's {digest[:12]}): install the client's "
                           "commit there")
    if setup is not None:
        _setup_once(setup)
    return fn(items)


@functools.cache
def _setup_once(setup: Callable[[], None]) -> None:
    setup()
    pin_threads()  # again: the setup may have loaded new thread pools (scipy's BLAS)


# -- on the client -----------------------------------------------------------------------------


@contextmanager
def connect(settings: ClusterSettings) -> Iterator[Session]:
    """A client of the scheduler at ``settings.address``, its workers checked for code."""
    from distributed import Client  # here only: the local path never loads dask

    log.info("cluster: connecting to %s", settings.address)
    try:
        client = Client(settings.address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except OSError as exc:  # distributed's connect timeout is an OSError too
        raise ClusterError(f"cannot reach the Dask scheduler at {settings.address}: {exc} "
                           f"(--scheduler or {SCHEDULER_ENV})") from None
    with client:
        try:
            client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except TimeoutError:
            raise ClusterError(f"no Dask worker joined {settings.address} within "
                               f"{WORKER_WAIT_S} s (start one: dask worker "
                               f"{settings.address} --nthreads 1)") from None
        session = Session(client, settings, package_digest())
        session.refuse_other_code()
        yield session


class Session:
    """A connected client whose workers run this code: ``map`` and what the report needs."""

    def __init__(self, client: Any, settings: ClusterSettings, digest: str) -> None:
        self.client, self.settings, self.digest = client, settings, digest
        self.workers = 0          # most workers seen at once
        self._threads, self._seen = 1, 0.0
        self._since = self._last_event_time()
        self._refresh(force=True)

    def refuse_other_code(self) -> None:
        """Fail with one line naming the first worker whose leakpipe differs."""
        digests = self.client.run(worker_digest, on_error="return")
        for worker, digest in sorted(digests.items()):
            if digest != self.digest:
                found = (f"digest {digest[:12]}" if isinstance(digest, str)
                         else f"{type(digest).__name__}: {digest}")
                raise CodeMismatch(f"Dask worker {worker} runs other leakpipe code ({found}, "
                                   f"this checkout {self.digest[:12]}): install this commit "
                                   "there or stop that worker")
        log.info("cluster: %d workers, %d threads, all on this code (%s)", len(digests),
                 self._threads, self.digest[:12])

    def map(self, fn: Callable[[list[T]], list[R]], items: Sequence[T],
            on_killed: Callable[[T, str], R],
            setup: Callable[[], None] | None = None) -> Iterator[R]:
        """``fn`` over ``items`` in chunks of ``settings.chunk``, results in item order.

        ``fn`` and ``setup`` travel by name: module-level functions (or ``functools.partial``
        of one); ``setup`` runs once per worker process before its first chunk. A chunk whose
        workers all died under it (Dask's ``KilledWorker``) is run again item by item, alone
        on the cluster, and an item that kills its worker that way too becomes
        ``on_killed(item, reason)``.
        """
        from distributed import KilledWorker

        step = self.settings.chunk
        chunks = deque(list(items[i:i + step]) for i in range(0, len(items), step))
        pending: deque[tuple[list[T], Any]] = deque()
        while chunks or pending:
            self._refresh()
            while chunks and len(pending) < AHEAD * self._threads:
                chunk = chunks.popleft()
                pending.append((chunk, self._submit(fn, chunk, setup)))
            chunk, future = pending.popleft()
            try:
                results = future.result()
            except KilledWorker:
                results = self._alone(fn, chunk, setup, on_killed, [f for _, f in pending])
            future.release()
            yield from results

    def submit(self, fn: Callable[[list[Any]], list[R]], items: list[Any], *, name: str,
               resources: Mapping[str, float] | None = None) -> Any:
        """One task, ``fn(items)`` on a worker of this code; a future of its list.

        ``fn`` travels by name (a module-level function); futures among ``items`` are the
        task's inputs (Dask runs it once they are done, with their results in their place);
        ``resources`` are what its worker must offer (``dask worker --resources GPU=1``);
        ``name`` shows in the dashboard.
        """
        return self._submit(fn, items, None, resources, name)

    def completed(self, futures: Sequence[Any]) -> Iterator[Any]:
        """``futures`` in the order they finish (however they end)."""
        from distributed import as_completed

        yield from as_completed(futures, loop=self.client.loop)

    def result(self, future: Any, what: str) -> Any:
        """The future's result; its task's exception if it raised one. A task that killed its
        worker each time it ran (``KilledWorker``) is a ``ClusterError`` naming ``what``."""
        from distributed import KilledWorker

        try:
            return future.result()
        except KilledWorker as exc:
            raise ClusterError(f"{what} killed its Dask worker each of "
                               f"{exc.allowed_failures + 1} times it ran (out of memory?)"
                               ) from None

    def wait_for_resource(self, resource: str, why: str) -> None:
        """Wait (up to ``WORKER_WAIT_S``) until a worker offers ``resource``."""
        deadline = time.monotonic() + WORKER_WAIT_S
        while not any(info.get("resources", {}).get(resource)
                      for info in self.client.scheduler_info()["workers"].values()):
            if time.monotonic() > deadline:
                raise ClusterError(f"no Dask worker of {self.settings.address} offers the "
                                   f"{resource} resource within {WORKER_WAIT_S} s ({why}; "
                                   f"start them with: dask worker ... --resources {resource}=1)")
            time.sleep(REFRESH_S)

    def workers_lost(self) -> int:
        """Workers that left the scheduler (died, killed, shut down) since this session
        began: their tasks ran again elsewhere."""
        return sum(1 for stamp, event in self.client.get_events("all")
                   if stamp > self._since and isinstance(event, dict)
                   and event.get("action") == "remove-worker")

    def _submit(self, fn: Callable[[list[T]], list[R]], chunk: list[T],
                setup: Callable[[], None] | None,
                resources: Mapping[str, float] | None = None, name: str | None = None) -> Any:
        extra: dict[str, Any] = {"resources": resources} if resources else {}
        if name:
            extra["key"] = f"{name}-{uuid.uuid4().hex}"
        return self.client.submit(_checked, fn, chunk, self.digest, setup, pure=False, **extra)

    def _alone(self, fn: Callable[[list[T]], list[R]], chunk: list[T],
               setup: Callable[[], None] | None, on_killed: Callable[[T, str], R],
               others: list[Any]) -> list[R]:
        """Each item of a chunk that killed its workers, one at a time with nothing else of
        ours running, so that a worker's death is that item's doing alone."""
        from distributed import KilledWorker

        for other in others:
            other.exception()  # waits until it is done, however it ended
        results = []
        for item in chunk:
            future = self._submit(fn, [item], setup)
            try:
                results.extend(future.result())
            except KilledWorker as exc:
                reason = (f"killed its Dask worker each of {exc.allowed_failures + 1} times "
                          "it ran (a crash in the reader or out of memory?)")
                log.warning("cluster: %s", reason)
                results.append(on_killed(item, reason))
            future.release()
        return results

    def _refresh(self, force: bool = False) -> None:
        """The window follows the cluster's threads (workers join late or leave)."""
        if not force and time.monotonic() - self._seen < REFRESH_S:
            return
        threads = self.client.nthreads()
        self._threads, self._seen = max(1, sum(threads.values())), time.monotonic()
        self.workers = max(self.workers, len(threads))

    def _last_event_time(self) -> float:
        return max((stamp for stamp, _ in self.client.get_events("all")), default=0.0)
