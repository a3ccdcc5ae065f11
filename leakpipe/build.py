"""Stage `build`: recordings -> two-stage-segmented log-mel HDF5, one file per split.

``run_build`` is what `leakpipe build` (and stages/build.py) calls: ``build`` inside one MLflow
run, then the JSON report (or, when unusable recordings stop the build, ``<report>.failed.json``
with the full list).

Recordings are processed (``leakpipe.build_recording``) by ``build.workers`` processes, this
one included (it computes whenever no finished recording is waiting to be written:
``leakpipe.features.pool``), or, given a scheduler, by the workers of a Dask cluster in chunks
(``leakpipe.cluster``; the report's ``backend``), and streamed into the split files in manifest
order by this process alone, so the output is the same byte for byte whatever the number of
workers or machines of one CPU type (docs/scale-out.md); each is decoded block by block
(``leakpipe.audio.io.stream_clips``), so memory stays bounded by a few blocks and clips per
worker, however long the recordings.
All split files are written under temporary names and renamed only when the whole build
succeeded; unusable recordings are listed with their reason in the report. Every recording's
channels are checked for clipping, DC offset and dead channels (``leakpipe.audio.quality``):
a failed check in ``build.quality.reject`` makes it unusable, any other is listed as flagged,
as is a WAV that holds fewer frames than its header claims (``truncated``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits
from tqdm import tqdm

from leakpipe import tracking
from leakpipe.build_recording import (
    RecordingJob,
    RecordingResult,
    run_chunk,
    run_one,
    start_worker,
    verify_results,
    verify_sample,
)
from leakpipe.cluster import ClusterSettings, Session, connect
from leakpipe.config import BuildConfig, ConfigError, RecordingStatsConfig, load_section
from leakpipe.constants import ALL_CLIPS, BINARY_CLASSES, KNOWN_CLASSES, LEAK_CLASS, SPLITS
from leakpipe.data.manifest import Recording, discover
from leakpipe.data.splits import assign_splits
from leakpipe.data.writer import SplitWriter, StatsColumns
from leakpipe.errors import DataError
from leakpipe.features.pool import ordered_map
from leakpipe.features.recording_stats import stat_names
from leakpipe.files import file_sha256, write_json_atomic
from leakpipe.names import class_name

log = logging.getLogger(__name__)


@dataclass
class BuildReport:
    """What the build did: counts per split and class, unusable files, timing."""

    class_names: tuple[str, ...]
    features: dict[str, Any]
    recordings: dict[str, dict[str, int]] = field(default_factory=dict)
    clips: dict[str, int] = field(default_factory=dict)
    unusable: list[dict[str, Any]] = field(default_factory=list)
    flagged: list[dict[str, Any]] = field(default_factory=list)
    skipped_classes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    workers: int = 1
    backend: str = "local"   # local: leakpipe.features.pool | dask: leakpipe.cluster
    workers_lost: int = 0    # Dask workers that left mid-build (Dask ran their tasks again)
    verify: dict[str, Any] | None = None  # --verify N: recomputed here and compared
    sha256: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        used = sum(sum(c.values()) for c in self.recordings.values())
        return {
            "class_names": list(self.class_names),
            "features": self.features,
            "recordings": self.recordings,
            "clips": self.clips,
            "n_recordings": used,
            "n_unusable": len(self.unusable),
            "unusable": self.unusable,
            "n_flagged": len(self.flagged),
            "flagged_by_check": self.flagged_by_check(),
            "flagged": self.flagged,
            "skipped_classes": self.skipped_classes,
            "seconds": round(self.seconds, 3),
            "recordings_per_s": round(used / self.seconds, 2) if self.seconds else None,
            "backend": self.backend,
            "workers": self.workers,
            "workers_lost": self.workers_lost,
            **({"verify": self.verify} if self.verify is not None else {}),
            "sha256": self.sha256,
        }

    def flagged_by_check(self) -> dict[str, int]:
        """Flagged (kept) recordings per failed check."""
        return dict(sorted(Counter(c for f in self.flagged for c in f["checks"]).items()))


def iter_results(job: RecordingJob, recordings: Sequence[Recording], workers: int,
                 session: Session | None = None) -> Iterator[RecordingResult]:
    """Results in input order: over ``workers`` local processes, this one included
    (``leakpipe.features.pool``), or over the Dask workers of ``session``, chunks of
    recordings per task (``leakpipe.cluster``)."""
    if session is None:
        tasks = [(job, i, rec.path) for i, rec in enumerate(recordings)]
        return ordered_map(run_one, tasks, workers, initializer=start_worker)
    # absolute: a worker's working folder is not this one (a relative build.source)
    items = [(i, rec.path.absolute()) for i, rec in enumerate(recordings)]
    return session.map(functools.partial(run_chunk, job), items, on_killed=_killed,
                       setup=start_worker)


def _killed(item: tuple[int, Path], reason: str) -> RecordingResult:
    """A recording that killed every Dask worker that read it: unusable (build.on_error)."""
    index, path = item
    return RecordingResult(index, error=f"{path}: {reason}")


# -- orchestration ------------------------------------------------------------------------------


def unknown_classes(recordings: Sequence[Recording], known: Sequence[str]) -> str:
    """One line naming the first class outside ``known`` and up to three of its rows, or ""."""
    label = next((r.label for r in recordings if r.label not in known), None)
    if label is None:
        return ""
    mine = [r.recording_id for r in recordings if r.label == label]
    more = f" and {len(mine) - 3} more" if len(mine) > 3 else ""
    return (f"class {label!r} ({len(mine)} row(s): {', '.join(mine[:3])}{more}) is none of "
            f"{', '.join(sorted(set(known)))} (matched without regard to case); correct the "
            "spelling, or list it in build.classes to train on a class of your own")


def select_classes(recordings: list[Recording], wanted: Sequence[str],
                   report: BuildReport | None = None) -> tuple[list[Recording], tuple[str, ...]]:
    """Keep the wanted classes (all when empty); class names sorted as the original did.

    The recordings' classes are already in leakpipe's spelling (``leakpipe.names``); so
    are ``wanted`` here. A class that is none of leakpipe's (``KNOWN_CLASSES``, ``NOLEAK``) and
    not in ``wanted`` is refused, naming its rows: a misspelt ``LEAK`` must not train as a
    class of its own (listing it in ``build.classes`` keeps a class of the user's own).
    """
    wanted = tuple(class_name(c) for c in wanted)
    unknown = unknown_classes(recordings, (*KNOWN_CLASSES, *BINARY_CLASSES, *wanted))
    if unknown:
        raise DataError(unknown)
    found = sorted({r.label for r in recordings})
    names = tuple(sorted(wanted)) if wanted else tuple(found)
    missing = [c for c in names if c not in found]
    if missing:
        raise DataError(f"build.classes names {missing[0]!r}, but no recording has that class "
                        f"(found: {found})")
    if LEAK_CLASS not in names:
        raise DataError(f"no {LEAK_CLASS} recordings found (classes: {found}); the leak class "
                        "must be present")
    kept = [r for r in recordings if r.label in names]
    if report is not None:
        report.skipped_classes = dict(Counter(r.label for r in recordings if r.label not in names))
    return kept, names


def build(cfg: BuildConfig, source: Path, out_dir: Path, progress: bool = True, *,
          session: Session | None = None, verify: int = 0) -> BuildReport:
    """Build ``out_dir/{train,val,test}.h5`` from the recordings named by ``source``, on the
    local pool or on ``session``'s Dask workers; ``verify`` recordings are recomputed here
    and compared with what the workers returned."""
    start = time.perf_counter()
    features = cfg.features
    report = BuildReport(class_names=(), features=features.to_dict())
    found = discover(source, cfg.group_by, cfg.duplicates)
    try:
        recordings, class_names = select_classes(found, cfg.classes, report)
    except DataError as exc:  # about the source as a whole: name it, as file errors name theirs
        raise DataError(f"{source}: {exc}") from None
    report.class_names = class_names
    split_of = assign_splits([r.label for r in recordings], [r.group for r in recordings],
                             (cfg.split.train, cfg.split.val, cfg.split.test), cfg.split.seed)
    workers = cfg.workers or os.cpu_count() or 1
    report.workers, report.backend = workers, "local" if session is None else "dask"
    job = recording_job(cfg)
    sample, computed = verify_sample(len(recordings), verify), {}
    columns = stats_columns(cfg.stats)
    label_of = {name: i for i, name in enumerate(class_names)}
    counts = {s: Counter() for s in SPLITS}
    log.info("build: %d recordings, classes %s, %s", len(recordings), list(class_names),
             f"{workers} workers" if session is None else f"Dask at {session.settings.address}")
    with ExitStack() as stack:
        stack.enter_context(threadpool_limits(1, user_api="blas"))  # why: one_blas_thread
        writers = [stack.enter_context(SplitWriter(
            out_dir / f"{split}.h5", split, features, class_names, dtype=cfg.dtype,
            chunk_mb=cfg.chunk_mb, store_waveform=cfg.store_waveform, stats=columns))
            for split in SPLITS]
        results = iter_results(job, recordings, workers, session)
        for result in tqdm(results, total=len(recordings), desc="build", unit="rec",
                           disable=not progress):
            rec = recordings[result.index]
            checks = sorted({i.check for i in result.issues})
            if result.index in sample and result.error is None:
                computed[result.index] = (rec.path, result)
            if result.error is not None:
                report.unusable.append({"path": str(rec.path), "reason": result.error,
                                        **({"checks": checks} if checks else {})})
                continue
            if checks:
                report.flagged.append({"path": str(rec.path), "checks": checks,
                                       "reason": "; ".join(i.reason for i in result.issues)})
            split = int(split_of[result.index])
            writers[split].append(result.mel, label_of[rec.label], rec.recording_id, rec.group,
                                  result.waveform, result.stats, result.rate)
            counts[SPLITS[split]][rec.label] += 1
        if session is not None:
            report.workers, report.workers_lost = session.workers, session.workers_lost()
        _check_errors(cfg, report)
        if verify:
            report.verify = verify_results(job, computed)
    report.recordings = {s: dict(sorted(counts[s].items())) for s in SPLITS}
    report.clips = {s: w.rows for s, w in zip(SPLITS, writers, strict=True)}
    report.sha256 = {s: file_sha256(out_dir / f"{s}.h5") for s in SPLITS}
    report.seconds = time.perf_counter() - start
    return report


def recording_job(cfg: BuildConfig) -> RecordingJob:
    """What a worker does with each recording under ``cfg`` (build's own helper or Dask's)."""
    n_clips = None if cfg.clips_per_recording == ALL_CLIPS else cfg.clips_per_recording
    return RecordingJob(cfg.features, n_clips, cfg.min_clip_fraction, cfg.store_waveform,
                        cfg.quality, cfg.stats, cfg.dtype)


def stats_columns(cfg: RecordingStatsConfig) -> StatsColumns:
    """The split files' statistics columns for ``build.stats``."""
    return StatsColumns(stat_names(cfg), cfg.to_dict())


def _check_errors(cfg: BuildConfig, report: BuildReport) -> None:
    if report.flagged:
        log.warning("build: %d recording(s) flagged %s (kept; build.quality.reject would "
                    "leave them out), first: %s: %s", len(report.flagged),
                    report.flagged_by_check(), report.flagged[0]["path"],
                    report.flagged[0]["reason"])
    if not report.unusable:
        return
    first = report.unusable[0]
    if cfg.on_error == "fail":
        raise BuildFailed(report, f"{len(report.unusable)} unusable recording(s), first: "
                          f"{first['reason']} (build.on_error=fail; set skip to leave them out)")
    log.warning("build: skipped %d unusable recording(s), first: %s", len(report.unusable),
                first["reason"])


class BuildFailed(DataError):
    """Unusable recordings with ``on_error: fail``; carries the report for the user."""

    def __init__(self, report: BuildReport, message: str) -> None:
        super().__init__(message)
        self.report = report


def with_overrides(cfg: BuildConfig, group_by: str | None,
                   sample_rate: int | None) -> BuildConfig:
    """``cfg`` with another ``group_by`` and another ``sample_rate`` (``fmax`` capped at its
    Nyquist frequency); a rate the features cannot use is a ``ConfigError`` naming it."""
    if group_by is not None:
        cfg = dataclasses.replace(cfg, group_by=group_by)
    if sample_rate is None:
        return cfg
    if sample_rate <= 0:
        raise ConfigError(f"--sample-rate {sample_rate}: must be a positive whole number of Hz")
    cfg = dataclasses.replace(cfg, sample_rate=sample_rate,
                              fmax=min(cfg.fmax, sample_rate / 2))
    problems = cfg.problems()
    if problems:
        key, why = problems[0]
        raise ConfigError(f"--sample-rate {sample_rate}: build.{key} {why}")
    return cfg


def run_build(params: Path, source: Path | None, out_dir: Path, report_path: Path, *,
              group_by: str | None = None, sample_rate: int | None = None,
              progress: bool = True, cluster: ClusterSettings | None = None,
              verify: int = 0) -> int:
    """The whole stage, on the local pool or the Dask ``cluster``; returns the exit code
    (errors raise ``LeakpipeError``). ``group_by`` / ``sample_rate`` override the section's."""
    cfg = with_overrides(load_section(params, "build"), group_by, sample_rate)
    source = source or Path(cfg.source)
    engine = connect(cluster) if cluster is not None else nullcontext()
    with engine as session, tracking.start_run("build") as run:
        run.log_params({"build": {**dataclasses.asdict(cfg), "source": str(source)}})
        try:
            report = build(cfg, source, out_dir, progress=progress, session=session,
                           verify=verify)
        except BuildFailed as exc:
            failed = report_path.with_name(report_path.stem + ".failed.json")
            write_json_atomic(failed, exc.report.to_dict())
            raise BuildFailed(exc.report, f"{exc} (full list: {failed})") from None
        info = report.to_dict()
        run.set_tags({tracking.TAG_DATA: tracking.split_digests(info["sha256"])})
        run.log_metrics({"build/recordings": info["n_recordings"],
                         "build/unusable": info["n_unusable"],
                         "build/flagged": info["n_flagged"],
                         "build/seconds": info["seconds"],
                         "build/recordings_per_s": info["recordings_per_s"] or 0.0,
                         **{f"build/clips_{s}": n for s, n in info["clips"].items()}})
        run.log_dict(info, "build_report.json")
    write_json_atomic(report_path, info)
    log.info("build: %d recordings (%s clips) -> %s in %.1f s, %d unusable",
             info["n_recordings"], info["clips"], out_dir, info["seconds"],
             info["n_unusable"])
    return 0

