"""Stage `build`: recordings -> two-stage-segmented log-mel HDF5, one file per split.

``run_build`` is what `leakpipe build` (and stages/build.py) calls: ``build`` inside one MLflow
run, then the JSON report (or, when unusable recordings stop the build, ``<report>.failed.json``
with the full list).

Recordings are processed by ``build.workers`` processes, this one included (it computes
whenever no finished recording is waiting to be written: ``leakpipe.features.pool``), and
streamed into the split files in manifest order, so the output is the same byte for byte
whatever the number of workers; each is decoded block by block
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
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from leakpipe import tracking
from leakpipe.audio.quality import Issue, SignalStats, find_issues, truncation
from leakpipe.config import (
    BuildConfig,
    FeatureConfig,
    QualityConfig,
    RecordingStatsConfig,
    load_section,
)
from leakpipe.constants import ALL_CLIPS, LEAK_CLASS, SPLITS
from leakpipe.data.manifest import Recording, discover
from leakpipe.data.splits import assign_splits
from leakpipe.data.writer import SplitWriter, StatsColumns
from leakpipe.errors import DataError
from leakpipe.features.pool import ordered_map
from leakpipe.features.recording_stats import StatsAccumulator, stat_names
from leakpipe.files import file_sha256, os_problem, write_json_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordingResult:
    """Features of one recording, or the reason it could not be used."""

    index: int
    mel: np.ndarray | None = None        # (clips, n_long, n_short, n_mels, n_frames), _Job.dtype
    waveform: np.ndarray | None = None   # (clips, clip_samples)
    error: str | None = None
    issues: tuple[Issue, ...] = ()       # failed signal checks (leakpipe.audio.quality)
    stats: np.ndarray | None = None      # (S,) whole-recording statistics
    rate: int = 0                        # the recording's own sample rate, Hz


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
            "workers": self.workers,
            "sha256": self.sha256,
        }

    def flagged_by_check(self) -> dict[str, int]:
        """Flagged (kept) recordings per failed check."""
        return dict(sorted(Counter(c for f in self.flagged for c in f["checks"]).items()))


# -- per recording (runs in worker processes) --------------------------------------------------


@dataclass(frozen=True)
class _Job:
    features: FeatureConfig
    n_clips: int | None  # None = every non-overlapping clip
    min_fraction: float
    store_waveform: bool
    quality: QualityConfig
    stats: RecordingStatsConfig
    dtype: str = "float32"  # the mel's storage type (build.dtype): cast here, half the bytes sent


def process_recording(job: _Job, index: int, path: Path) -> RecordingResult:
    """Load, check, clip, segment and log-mel one recording; errors become a reason string.

    The recording is decoded once, block by block: each block goes through the signal checks
    and the whole-recording statistics (at the recording's own rate) and gives up the frames of
    the clips that lie in it, so memory does not grow with its length. The order of the
    verdicts is that of a whole-file read: unreadable or non-finite audio first, then the
    checks in ``build.quality.reject``, then too short for a clip.
    """
    from leakpipe.audio.clips import AudioError, plan_clips
    from leakpipe.audio.io import open_audio, read_clips
    from leakpipe.features.mel import clip_features

    try:
        source = open_audio(path)
        signal = SignalStats(source.channels, source.subtype)
        levels = StatsAccumulator(job.stats, source.sample_rate)
        plan = plan_clips(source.frames, source.sample_rate, job.features, job.n_clips,
                          job.min_fraction)

        def on_block(block: np.ndarray) -> None:
            signal.add(block)
            levels.add(block)

        clips = read_clips(source, plan, on_block)  # (clips, clip_samples)
        issues = (*find_issues(signal.stats(), job.quality, source.subtype),
                  *truncation(source.frames, source.claimed_frames))
        rejected = [i.reason for i in issues if i.check in job.quality.reject]
        if rejected:
            return RecordingResult(index, error=f"{path}: {'; '.join(rejected)} "
                                                "(build.quality.reject)", issues=issues)
        if plan.short:
            raise plan.too_short(path)
    except AudioError as exc:
        return RecordingResult(index, error=str(exc))
    except OSError as exc:
        return RecordingResult(index, error=f"{path}: {os_problem(path, exc)}")
    mel = clip_features(clips, job.features).astype(job.dtype, copy=False)
    return RecordingResult(index, mel=mel, waveform=clips if job.store_waveform else None,
                           issues=issues, stats=levels.values(), rate=source.sample_rate)


def _run_one(args: tuple[_Job, int, Path]) -> RecordingResult:
    return process_recording(*args)


def one_blas_thread() -> None:
    """Limit BLAS (the mel filterbank's matrix product) to one thread in this process.

    The product per recording is small ((clips * segments, n_bins) @ (n_bins, n_mels)), so
    OpenBLAS's threads only wait on each other: measured with 2 threads, a recording's mel took
    4 to 6.5 ms against 0.6 to 0.9 ms with one, and every pool worker's threads spin on the
    same cores. Parallelism comes from the recordings; the product's bytes do not change.
    """
    threadpool_limits(1, user_api="blas")


def iter_results(job: _Job, recordings: Sequence[Recording],
                 workers: int) -> Iterator[RecordingResult]:
    """Results in input order, over ``workers`` processes, this one included
    (``leakpipe.features.pool``)."""
    tasks = [(job, i, rec.path) for i, rec in enumerate(recordings)]
    return ordered_map(_run_one, tasks, workers, initializer=_start_worker)


def _start_worker() -> None:
    """A helper's setup before its first recording: one BLAS thread, the audio and feature
    modules imported (scipy.signal: about 1.5 s), so its first chunk is not late."""
    one_blas_thread()
    import leakpipe.audio.io  # noqa: F401
    import leakpipe.features.mel  # noqa: F401


# -- orchestration ------------------------------------------------------------------------------


def select_classes(recordings: list[Recording], wanted: Sequence[str],
                   report: BuildReport | None = None) -> tuple[list[Recording], tuple[str, ...]]:
    """Keep the wanted classes (all when empty); class names sorted as the original did."""
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


def build(cfg: BuildConfig, source: Path, out_dir: Path, progress: bool = True) -> BuildReport:
    """Build ``out_dir/{train,val,test}.h5`` from the recordings named by ``source``."""
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
    report.workers = workers
    n_clips = None if cfg.clips_per_recording == ALL_CLIPS else cfg.clips_per_recording
    job = _Job(features, n_clips, cfg.min_clip_fraction, cfg.store_waveform, cfg.quality,
               cfg.stats, cfg.dtype)
    columns = stats_columns(cfg.stats)
    label_of = {name: i for i, name in enumerate(class_names)}
    counts = {s: Counter() for s in SPLITS}
    log.info("build: %d recordings, classes %s, %d workers", len(recordings),
             list(class_names), workers)
    with ExitStack() as stack:
        stack.enter_context(threadpool_limits(1, user_api="blas"))  # see one_blas_thread
        writers = [stack.enter_context(SplitWriter(
            out_dir / f"{split}.h5", split, features, class_names, dtype=cfg.dtype,
            chunk_mb=cfg.chunk_mb, store_waveform=cfg.store_waveform, stats=columns))
            for split in SPLITS]
        results = iter_results(job, recordings, workers)
        for result in tqdm(results, total=len(recordings), desc="build", unit="rec",
                           disable=not progress):
            rec = recordings[result.index]
            checks = sorted({i.check for i in result.issues})
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
        _check_errors(cfg, report)
    report.recordings = {s: dict(sorted(counts[s].items())) for s in SPLITS}
    report.clips = {s: w.rows for s, w in zip(SPLITS, writers, strict=True)}
    report.sha256 = {s: file_sha256(out_dir / f"{s}.h5") for s in SPLITS}
    report.seconds = time.perf_counter() - start
    return report


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


def run_build(params: Path, source: Path | None, out_dir: Path, report_path: Path, *,
              group_by: str | None = None, progress: bool = True) -> int:
    """The whole stage; returns the exit code (errors raise ``LeakpipeError``)."""
    cfg = load_section(params, "build")
    if group_by is not None:
        cfg = dataclasses.replace(cfg, group_by=group_by)
    source = source or Path(cfg.source)
    with tracking.start_run("build") as run:
        run.log_params({"build": {**dataclasses.asdict(cfg), "source": str(source)}})
        try:
            report = build(cfg, source, out_dir, progress=progress)
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

