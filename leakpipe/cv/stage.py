"""Stage `crossval` / `leakpipe cv`: K grouped folds, every method on each, pooled figures.

``run_cv``:

1. pools the built splits into one table of recordings (``data.pool_recordings``) and assigns
   folds over sites with an inner grouped val per fold (``folds.make_folds``);
2. per fold, unless its result is already in the work folder: writes the fold's three split
   files, runs every method (``methods.run_fold_methods``), saves the fold's test scores and
   decisions (``fold-NN/result.json``, atomically) and drops the fold's files. A killed run
   resumes at the first fold without a result (the CNN inside a fold resumes from its
   checkpoint); other inputs, settings or package code (``code_digest``: folds
   computed by other code are never pooled with this code's) start afresh. Given a Dask
   scheduler, the folds' methods run on its workers instead (``dispatch``: one task per fold
   and method group) and this process writes each fold's result as it arrives;
3. pools the out-of-fold predictions (``report.summarise``) and writes `metrics/cv.json`, the
   predictions CSV, the per-fold plot rows and figure, each atomically;
4. logs one MLflow parent run with a child run per fold and method.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe import tracking
from leakpipe.cluster import ClusterSettings
from leakpipe.code_digest import package_digest
from leakpipe.config import CrossvalConfig, load_section
from leakpipe.config.crossval import CNN_METHOD
from leakpipe.cv.data import Recordings, pool_recordings, write_fold
from leakpipe.cv.draws import draw_figures, with_draws
from leakpipe.cv.figure import folds_figure
from leakpipe.cv.folds import ROLES, TEST, Fold, make_folds
from leakpipe.cv.methods import Settings, run_fold_methods
from leakpipe.cv.recording_level import nested_choices
from leakpipe.cv.report import (
    OutOfFold,
    fold_records,
    oof_rows,
    recording_rows,
    summarise,
    summary_line,
)
from leakpipe.cv.results import (
    PLANNED,
    RESULT_FILE,
    STATE_FILE,
    finished,
    fold_dir,
    fold_record,
    planned,
    save,
    test_tables,
    with_plan,
)
from leakpipe.errors import DataError
from leakpipe.files import file_sha256, write_csv_atomic, write_json_atomic
from leakpipe.metric_names import json_safe
from leakpipe.preload.plan import read_plan

log = logging.getLogger(__name__)

STAGE = "crossval"
PLOT_ROWS = "folds.csv"
PLOT_FIGURE = "folds.png"
TAG_FOLD, TAG_METHOD = "leakpipe.cv.fold", "leakpipe.cv.method"
TAG_BACKEND = "leakpipe.cv.backend"   # the parent run's, on a Dask cluster only


@dataclass(frozen=True)
class CvPaths:
    """What the stage reads (the split files, their stamp, the plan) and writes."""

    splits: Mapping[str, Path]    # name -> built split file; all of them are pooled
    plan: Path | None             # the preload plan; None: planned here from the first fold
    metrics: Path
    predictions: Path
    plots_dir: Path
    work: Path                    # fold results, fold files, CNN checkpoints (resume)


def load_settings(params: Path, plan: Mapping[str, Any] | None, *,
                  folds: int | None = None) -> Settings:
    cv: CrossvalConfig = load_section(params, "cv")
    if folds is not None:
        cv = dataclasses.replace(cv, folds=folds)
    names = ("model", "train", "runtime", "decision", "evaluate", "baselines", "detector",
             "preload")
    return Settings(cv=cv, plan=plan or {}, **{n: load_section(params, n) for n in names})


def run_cv(paths: CvPaths, params: Path, *, folds: int | None = None,
           repeats: int | None = None, tags: Mapping[str, str] | None = None,
           progress: bool = True, cluster: ClusterSettings | None = None) -> dict[str, Any]:
    """The whole stage, here or on the Dask ``cluster``, over ``repeats`` draws of the folds
    (default ``cv.repeats``); returns the summary written to ``paths.metrics`` (the same either
    way)."""
    started = time.time()              # the MLflow run, logged at the end, starts here
    plan = read_plan(paths.plan) if paths.plan is not None else None
    settings = load_settings(params, plan, folds=folds)
    cv = settings.cv
    repeats = cv.repeats if repeats is None else repeats
    recordings = pool_recordings(list(paths.splits.values()))
    draws = [make_folds(recordings.label_names, recordings.group, cv.folds, cv.val_fraction,
                        cv.seed + d) for d in range(repeats)]    # draw d: seed cv.seed + d
    sha = {name: file_sha256(p) for name, p in paths.splits.items()}
    _open_work(paths.work, {"sha256": sha, "settings": settings.to_dict(),
                            "code": package_digest()})
    log.info("crossval: %d recordings at %d sites, %d folds, %d draw(s), methods %s",
             len(recordings), len(set(recordings.group)), cv.folds, repeats, list(cv.methods))
    drawn = []
    for d, fold_list in enumerate(draws):
        results, settings = _draw_results(d, fold_list, recordings, settings, sha, paths.work,
                                          progress, cluster)
        drawn.append(results)
    if cluster is not None:
        tags = {**(tags or {}), TAG_BACKEND: "dask"}
    results = drawn[0]                 # the figures per fold, the tables: the first draw's
    oof = assemble(results, cv.methods)
    recording_oof = assemble_recordings(results, cv.methods)
    margin = settings.detector.selection_margin
    summary = summarise(oof, recording_oof, resamples=cv.bootstrap_resamples,
                        confidence=cv.confidence, seed=cv.seed, margin=margin,
                        nested=nested_choices(results, margin))
    summary = with_draws(summary, draw_figures(
        [assemble_recordings(r, cv.methods) for r in drawn], resamples=cv.bootstrap_resamples,
        confidence=cv.confidence, seed=cv.seed), margin)
    summary["sizes"] = [r["sizes"] for r in results]
    histories = [r["methods"][CNN_METHOD]["info"]["history"] for r in results
                 if CNN_METHOD in r["methods"]]
    _write_outputs(paths, summary, oof, recording_oof, histories)
    _log_runs(paths, summary, results, settings, sha, tags or {}, started)
    return summary


def draw_work(work: Path, d: int) -> Path:
    """Draw ``d``'s fold folders: the work folder itself for the first draw (as a run of one
    draw keeps them), ``draw-DD`` inside it for the others."""
    return work if d == 0 else work / f"draw-{d + 1:02d}"


def _draw_results(d: int, fold_list: list[Fold], recordings: Recordings, settings: Settings,
                  sha: Mapping[str, str], work: Path, progress: bool,
                  cluster: ClusterSettings | None) -> tuple[list[dict[str, Any]], Settings]:
    """Draw ``d``'s folds (seed ``cv.seed + d``), run here or on the cluster."""
    cv = settings.cv
    where = draw_work(work, d)
    where.mkdir(parents=True, exist_ok=True)
    if d:
        log.info("crossval: draw %d (fold seed %d) in %s", d + 1, cv.seed + d, where)
    if cluster is not None:
        from leakpipe.cv.dispatch import results_on_cluster

        return results_on_cluster(cluster, fold_list, recordings, tuple(sha.values()), settings,
                                  where)
    results = []
    for fold in fold_list:
        results.append(_fold_result(fold, recordings, settings, where, progress))
        settings = with_plan(settings, where)
    return results, settings


def _open_work(work: Path, inputs: Mapping[str, Any]) -> None:
    """Keep the work folder's finished folds when it was made for the same inputs; clear
    only what this stage wrote there otherwise, and refuse a folder it did not make."""
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
    state = work / STATE_FILE
    if state.is_file():
        if json.loads(state.read_text()).get("inputs") == digest:
            done = sorted(str(p.parent.relative_to(work))
                          for p in work.glob(f"**/fold-*/{RESULT_FILE}"))
            if done:
                log.info("crossval: resuming in %s (finished: %s)", work, ", ".join(done))
            return
        log.info("crossval: %s holds folds of other inputs or settings: starting afresh", work)
        for old in (*work.glob("fold-*"), *work.glob("draw-*"), work / PLANNED):
            shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)
    elif work.is_dir() and any(work.iterdir()):
        raise DataError(f"{work}: not empty and not a cross-validation work folder (no "
                        f"{STATE_FILE}); choose an empty or new folder")
    work.mkdir(parents=True, exist_ok=True)
    write_json_atomic(state, {"inputs": digest})


def _fold_result(fold: Fold, recordings: Recordings, settings: Settings, work: Path,
                 progress: bool) -> dict[str, Any]:
    done = finished(work, fold)
    if done is not None:
        return done
    log.info("fold %d/%d: %s recordings (train / val / test)", fold.index + 1,
             settings.cv.folds, " / ".join(str(len(fold.rows(r))) for r in ROLES))
    directory = fold_dir(work, fold)
    data = directory / "data"
    files = {r: data / f"{r}.h5" for r in ROLES}
    if not all(p.is_file() for p in files.values()):   # each file is committed whole
        files = write_fold(recordings, {r: fold.rows(r) for r in ROLES}, data)
    if not settings.plan:
        settings = planned(settings, files, work)
    methods = run_fold_methods(files, settings, directory / "fit", progress=progress)
    result = fold_record(fold, test_tables(files[TEST]), methods)
    save(work, fold, result)
    shutil.rmtree(data)
    shutil.rmtree(directory / "fit", ignore_errors=True)
    return result


def assemble_recordings(results: Sequence[Mapping[str, Any]],
                        methods: Sequence[str]) -> OutOfFold:
    """The fold results' recording verdicts as one out-of-fold table (``clip`` unused: 0)."""
    def cat(key: str) -> np.ndarray:
        return np.concatenate([np.asarray(r["test_recordings"][key]) for r in results])

    def method(m: str, key: str, dtype: type) -> np.ndarray:
        return np.concatenate([np.asarray(r["methods"][m]["recording"][key], dtype=dtype)
                               for r in results])

    truth = cat("leak").astype(bool)
    fold = np.concatenate([np.full(len(r["test_recordings"]["leak"]), r["fold"])
                           for r in results])
    return OutOfFold(fold=fold, recording_id=cat("recording_id"), group=cat("group"),
                     clip=np.zeros(len(truth), dtype=int), truth=truth,
                     scores={m: method(m, "scores", np.float64) for m in methods},
                     decision={m: method(m, "decision", bool) for m in methods})


def assemble(results: Sequence[Mapping[str, Any]], methods: Sequence[str]) -> OutOfFold:
    """The fold results as one out-of-fold table."""
    def cat(key: str) -> np.ndarray:
        return np.concatenate([np.asarray(r["test"][key]) for r in results])

    fold = np.concatenate([np.full(len(r["test"]["leak"]), r["fold"]) for r in results])
    return OutOfFold(
        fold=fold, recording_id=cat("recording_id"), group=cat("group"), clip=cat("clip"),
        truth=cat("leak").astype(bool),
        scores={m: np.concatenate([np.asarray(r["methods"][m]["scores"], dtype=np.float64)
                                   for r in results]) for m in methods},
        decision={m: np.concatenate([np.asarray(r["methods"][m]["decision"], dtype=bool)
                                     for r in results]) for m in methods})


def recordings_csv(predictions: Path) -> Path:
    """Where the out-of-fold recording verdicts go: beside the clip predictions."""
    return predictions.with_name(f"{predictions.stem}_recordings.csv")


def _write_outputs(paths: CvPaths, summary: Mapping[str, Any], oof: OutOfFold,
                   recording_oof: OutOfFold,
                   histories: Sequence[Sequence[Mapping[str, float]]]) -> None:
    write_json_atomic(paths.metrics, json_safe(dict(summary)))
    write_csv_atomic(paths.predictions, oof_rows(oof))
    write_csv_atomic(recordings_csv(paths.predictions), recording_rows(recording_oof))
    write_csv_atomic(paths.plots_dir / PLOT_ROWS, fold_records(json_safe(dict(summary))))
    figure = folds_figure(summary, histories)
    tmp = paths.plots_dir / f".{PLOT_FIGURE}.tmp.png"
    figure.savefig(tmp, dpi=100)
    tmp.replace(paths.plots_dir / PLOT_FIGURE)


def _finite(metrics: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and math.isfinite(v)}


def _log_runs(paths: CvPaths, summary: Mapping[str, Any], results: Sequence[Mapping[str, Any]],
              settings: Settings, sha: Mapping[str, str], tags: Mapping[str, str],
              started: float) -> None:
    """One parent run (pooled figures, the outputs) from ``started`` on, and a child per fold
    and method spanning that method's work (a resumed fold's: when it ran)."""
    pooled = {f"{_section('cv', name)}/{m}/{name}{suffix}": fig[key]
              for m, figs in summary["methods"].items() for name, fig in figs.items()
              for key, suffix in (("mean", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"))}
    with tracking.start_run(STAGE, tags={**tags, **{f"leakpipe.sha256.{k}": v
                                                    for k, v in sha.items()}},
                            started_at=started) as parent:
        selected = {tracking.TAG_SELECTED_KIND: str(summary["selected"])}
        if source := tags.get(tracking.TAG_CV_SOURCE):      # `leakpipe cv --source`
            selected["mlflow.runName"] = f"cv {Path(source).name}"
        parent.set_tags(selected)
        parent.add_note(f"Selected kind: **{summary['selected']}**. "
                        + summary_line(summary, paths.metrics))
        parent.log_params({"cv": dataclasses.asdict(settings.cv)})
        tracking.log_summary(parent, pooled, STAGE)
        for path in (paths.metrics, paths.predictions, paths.plots_dir / PLOT_FIGURE):
            parent.log_artifact(path, STAGE)
        for result in results:
            for method, out in result["methods"].items():
                _log_child(parent.run_id, result, method, out, summary)


def _section(head: str, name: str) -> str:
    """The MLflow chart section of a figure: recording figures (the primary ones) under
    ``head``, clip figures under ``<head>_clip``, which the UI lists after it."""
    return f"{head}_clip" if name.startswith("clip_") else head


def _log_child(parent_id: str | None, result: Mapping[str, Any], method: str,
               out: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
    fold = int(result["fold"])
    span = out.get("span") or (None, None)
    with tracking.start_run(STAGE, parent_run_id=parent_id,
                            tags={TAG_FOLD: str(fold + 1), TAG_METHOD: method},
                            started_at=span[0], ended_at=span[1]) as run:
        run.set_tags({"mlflow.runName": f"{STAGE} fold {fold + 1} {method}"})
        info = out["info"]
        run.log_params({"threshold": out["threshold"], **{k: v for k, v in info.items()
                                                          if k != "history"}})
        figs = summary["methods"][method]
        run.log_metrics(_finite({f"{_section('test', name)}/{name}": fig["folds"][fold]
                                 for name, fig in figs.items()}))
        for h in info.get("history", []):
            run.log_metrics(_finite({k: v for k, v in h.items() if k != "epoch"}),
                            step=int(h["epoch"]))
