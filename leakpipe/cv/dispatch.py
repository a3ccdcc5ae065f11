"""`crossval`'s folds on a Dask cluster: one task per (fold, method group), this process the
only writer (docs/scale-out.md, section 7).

``results_on_cluster`` stands in for the sequential loop of ``leakpipe.cv.stage.run_cv``:

- folds with a ``result.json`` are kept as they are (a killed run, of either kind, resumes);
- the preload plan, when none was given, is made here exactly where the sequential loop
  makes it (from the first fold to compute), and the later folds read it back as that loop
  does;
- every method group of every remaining fold is one task (``leakpipe.cv.tasks``); all are
  submitted at once (a few dozen, each seconds to minutes of work), the CNN's asking for a
  ``GPU`` worker resource when ``runtime.device`` is ``cuda``, and the fused task taking the
  CNN's and logger_stats' results of its fold as inputs;
- a fold's result is assembled in the sequential order of its methods and written the moment
  its last task returns, whatever the order folds finish in; the results are then pooled in
  fold order, so the pooled figures are the sequential run's.

A worker lost mid-task: Dask runs its tasks again elsewhere (the fold's methods are pure
functions of the task). A task that raised: its error ends the run, the folds written so far
stay. A driver killed: the tasks are dropped with its connection, the written folds stay.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leakpipe.cluster import ClusterSettings, Session, connect
from leakpipe.cv.data import Recordings, write_fold
from leakpipe.cv.folds import TRAIN, VAL, Fold
from leakpipe.cv.methods import Settings
from leakpipe.cv.results import finished, fold_dir, fold_record, planned, save, with_plan
from leakpipe.cv.tasks import (
    CNN_GROUP,
    FUSED_GROUP,
    ORDER,
    STATS_GROUP,
    FoldTask,
    GroupResult,
    Threads,
    method_groups,
    run_group,
)

log = logging.getLogger(__name__)

GPU = "GPU"   # the Dask worker resource a CUDA CNN task asks for


def results_on_cluster(cluster: ClusterSettings, folds: Sequence[Fold], recordings: Recordings,
                       sha256: tuple[str, ...], settings: Settings,
                       work: Path) -> tuple[list[dict[str, Any]], Settings]:
    """Every fold's result, in fold order, and the settings after the last fold (with the
    plan made on the way, as the sequential loop leaves them)."""
    results: dict[int, dict[str, Any]] = {}
    todo: list[tuple[Fold, Settings]] = []
    for fold in folds:                      # the sequential loop's plan, fold by fold
        done = finished(work, fold)
        if done is not None:
            results[fold.index] = done
        else:
            todo.append((fold, _plan_for(fold, recordings, settings, work)))
        settings = with_plan(settings, work)
    if todo:
        with connect(cluster) as session:
            results.update(_compute(session, todo, recordings, sha256, work))
            lost = session.workers_lost()
            log.info("crossval: %d folds computed on %d Dask workers (%d lost: their tasks ran "
                     "again)", len(todo), session.workers, lost)
    return [results[fold.index] for fold in folds], settings


def _plan_for(fold: Fold, recordings: Recordings, settings: Settings, work: Path) -> Settings:
    """``settings`` for a fold to compute: planned from its train and val files, written to
    a temporary folder here, when there is no plan yet (``leakpipe cv --source``)."""
    if settings.plan:
        return settings
    with tempfile.TemporaryDirectory(prefix="leakpipe-cv-plan-") as tmp:
        files = write_fold(recordings, {r: fold.rows(r) for r in (TRAIN, VAL)}, Path(tmp))
        return planned(settings, files, work)


def _compute(session: Session, todo: Sequence[tuple[Fold, Settings]], recordings: Recordings,
             sha256: tuple[str, ...], work: Path) -> dict[int, dict[str, Any]]:
    threads = Threads.here()
    splits = tuple(p.resolve() for p in recordings.paths)
    pending: dict[Any, tuple[Fold, str]] = {}       # future -> its fold and group
    for fold, settings in todo:
        groups = method_groups(settings.cv.methods)
        log.info("fold %d/%d: %s recordings (train / val / test), %d tasks: %s",
                 fold.index + 1, settings.cv.folds,
                 " / ".join(str(len(fold.rows(r))) for r in (TRAIN, VAL, "test")),
                 len(groups), ", ".join(groups))
        futures: dict[str, Any] = {}
        for number, (group, methods) in enumerate(groups.items()):
            task = FoldTask(fold=fold, group=group, methods=methods, settings=settings,
                            splits=splits, sha256=sha256, threads=threads, tables=number == 0)
            inputs = ([futures[CNN_GROUP], futures[STATS_GROUP]] if group == FUSED_GROUP
                      else [])
            resources = _resources(session, settings) if group == CNN_GROUP else None
            futures[group] = session.submit(run_group, [task, *inputs], resources=resources,
                                            name=f"crossval-fold{fold.index + 1:02d}-{group}")
            pending[futures[group]] = (fold, group)
    return _collect(session, pending, work)


def _resources(session: Session, settings: Settings) -> dict[str, float] | None:
    """A GPU worker for a CNN that must run on CUDA; none asked for otherwise (``auto``
    runs where the task lands: see docs/scale-out.md)."""
    if settings.runtime.device != "cuda":
        return None
    session.wait_for_resource(GPU, "runtime.device is cuda")
    return {GPU: 1}


def _collect(session: Session, pending: dict[Any, tuple[Fold, str]],
             work: Path) -> dict[int, dict[str, Any]]:
    """Each fold's result, written as soon as its last task is in."""
    arrived: dict[int, dict[str, GroupResult]] = {}
    expected: dict[int, int] = {}
    for fold, _ in pending.values():
        expected[fold.index] = expected.get(fold.index, 0) + 1
    results = {}
    for future in session.completed(list(pending)):
        fold, group = pending[future]
        what = f"crossval fold {fold.index + 1} ({group})"
        (out,) = session.result(future, what)
        arrived.setdefault(fold.index, {})[group] = out
        if len(arrived[fold.index]) == expected[fold.index]:
            results[fold.index] = _finish(fold, arrived.pop(fold.index), work)
    return results


def _finish(fold: Fold, groups: dict[str, GroupResult], work: Path) -> dict[str, Any]:
    """The fold's record, its methods in the sequential order, saved; a sequential run's
    leftovers of this fold (its files, its CNN checkpoints) removed as that run would."""
    ordered = [groups[g] for g in ORDER if g in groups]
    tables = next(g.tables for g in ordered if g.tables is not None)
    result = fold_record(fold, tables, [m for g in ordered for m in g.methods])
    save(work, fold, result)
    for leftover in ("data", "fit"):
        shutil.rmtree(fold_dir(work, fold) / leftover, ignore_errors=True)
    log.info("fold %d: finished -> %s", fold.index + 1, fold_dir(work, fold))
    return result
