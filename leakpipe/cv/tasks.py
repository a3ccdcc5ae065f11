"""What a Dask worker runs for `crossval` on a cluster: one fold's methods of one group.

A task gets the fold (its recordings' roles), the settings and the split files' paths and
SHA-256s. It checks that it reads the bytes the driver pooled, writes the fold's three files
into a temporary folder of its own (``data.write_fold``, as the sequential run does into the
work folder), runs its methods exactly as ``methods.run_fold_methods`` runs them (the same
functions, the same seeds, in the same order inside the group) and returns their results; the
driver (``leakpipe.cv.dispatch``) writes everything. The groups:

- ``cnn``: the network, the expensive one (the task that may ask for a GPU);
- ``logger_stats``: the recordings' level statistics;
- ``baselines``: every other method of ``cv.methods``, fitted together as
  ``methods.run_baselines`` fits them (one read of the features);
- ``fused``: the CNN's and logger_stats' results of the same fold stacked; its task takes
  those two tasks' results as inputs, so Dask runs it after both;
- ``rules``: the logger's rules (min_level, band_min_level), from the recordings' statistics.

Threads: a task runs torch and the BLAS libraries on the driver's thread counts (``Threads``),
so a fold's figures are those a sequential run in the driver's process computes (the CNN's
float sums depend on the thread count), whichever worker, with whatever cores, ran it.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_info, threadpool_limits

from leakpipe.baselines.logger_stats import read_recordings
from leakpipe.cluster import worker_name
from leakpipe.config.crossval import CNN_METHOD, FUSED_METHOD, RULE_METHODS, STATS_METHOD
from leakpipe.cv.data import pool_recordings, write_fold
from leakpipe.cv.folds import ROLES, TEST, Fold
from leakpipe.cv.methods import (
    MethodResult,
    Settings,
    run_baselines,
    run_cnn,
    run_fused,
    run_logger_stats,
    run_rules,
    timed,
    with_recordings,
)
from leakpipe.cv.results import test_tables
from leakpipe.errors import DataError
from leakpipe.files import file_sha256

CNN_GROUP, STATS_GROUP, BASELINES_GROUP, FUSED_GROUP = "cnn", "logger_stats", "baselines", "fused"
RULES_GROUP = "rules"
ORDER = (CNN_GROUP, STATS_GROUP, FUSED_GROUP, RULES_GROUP, BASELINES_GROUP)  # as run_fold_methods


@dataclass(frozen=True)
class Threads:
    """Intra-op threads of torch and of the BLAS libraries, as the driver has them."""

    torch: int
    blas: int

    @classmethod
    def here(cls) -> Threads:
        import torch

        blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
        return cls(torch=torch.get_num_threads(), blas=max(blas, default=1))


@dataclass(frozen=True)
class FoldTask:
    """One (fold, method group): everything a worker needs besides the split files."""

    fold: Fold
    group: str                    # one of ORDER
    methods: tuple[str, ...]      # the group's methods, in cv.methods order
    settings: Settings
    splits: tuple[Path, ...]      # absolute paths, in the driver's pooling order
    sha256: tuple[str, ...]       # of each split file, as the driver read it
    threads: Threads
    tables: bool                  # also return the test file's rows (one task per fold does)

    @property
    def name(self) -> str:
        return f"crossval fold {self.fold.index + 1} {self.group}"


@dataclass(frozen=True)
class GroupResult:
    """A task's methods, in run_fold_methods' order; the test rows when asked for."""

    group: str
    methods: tuple[MethodResult, ...]
    tables: tuple[dict[str, list[Any]], dict[str, list[Any]]] | None


def method_groups(methods: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``cv.methods`` as groups (only the non-empty ones), in ``ORDER``."""
    own = (CNN_METHOD, STATS_METHOD, FUSED_METHOD, *RULE_METHODS)
    groups = {CNN_GROUP: tuple(m for m in methods if m == CNN_METHOD),
              STATS_GROUP: tuple(m for m in methods if m == STATS_METHOD),
              FUSED_GROUP: tuple(m for m in methods if m == FUSED_METHOD),
              RULES_GROUP: tuple(m for m in methods if m in RULE_METHODS),
              BASELINES_GROUP: tuple(m for m in methods if m not in own)}
    return {g: groups[g] for g in ORDER if groups[g]}


def run_group(items: list[Any]) -> list[GroupResult]:
    """The task (``leakpipe.cluster.Session.submit``): ``[task]``, or for ``fused``
    ``[task, cnn results, logger_stats results]``."""
    task, *inputs = items
    _check_splits(task)
    with tempfile.TemporaryDirectory(prefix="leakpipe-cv-") as tmp:
        recordings = pool_recordings(task.splits)
        files = write_fold(recordings, {r: task.fold.rows(r) for r in ROLES}, Path(tmp) / "data")
        tables = {role: read_recordings(files[role]) for role in ROLES}
        settings = task.settings
        with _threads(task.threads):
            if task.group == CNN_GROUP:
                fit_dir = Path(tmp) / "fit"
                fit_dir.mkdir()
                results = [timed(lambda: run_cnn(files, settings, fit_dir))]
            elif task.group == STATS_GROUP:
                results = [timed(lambda: run_logger_stats(tables, settings))]
            elif task.group == FUSED_GROUP:
                cnn, stats = (done[0].methods[0] for done in inputs)
                results = [timed(lambda: run_fused(cnn, stats, tables, settings))]
            elif task.group == RULES_GROUP:
                results = run_rules(tables, settings, task.methods)
            else:
                results = run_baselines(files, settings, task.methods)
            methods = tuple(with_recordings(r, tables, settings) for r in results)
        rows = test_tables(files[TEST]) if task.tables else None
    return [GroupResult(task.group, methods, rows)]


@contextmanager
def _threads(threads: Threads) -> Iterator[None]:
    """The driver's thread counts for the task, then the worker's own (one) again."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads.torch)
    try:
        with threadpool_limits(limits=threads.blas, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(before)


def _check_splits(task: FoldTask) -> None:
    """The split files must be here, at the driver's paths, with the driver's bytes."""
    for path, sha in zip(task.splits, task.sha256, strict=True):
        try:
            stat = path.stat()
        except OSError:
            raise DataError(f"{path}: not found on Dask worker {worker_name()} (crossval on a "
                            "cluster reads the split files at the same absolute path on "
                            "every worker: a shared mount, or dvc pull there)") from None
        if _sha256(str(path), stat.st_size, stat.st_mtime_ns) != sha:
            raise DataError(f"{path}: other bytes on Dask worker {worker_name()} than on the "
                            "machine that runs crossval (dvc pull there, or share the folder)")


@functools.lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:  # noqa: ARG001 (the cache key)
    """A split file's SHA-256, once per worker while the file stays as it is."""
    return file_sha256(Path(path))
