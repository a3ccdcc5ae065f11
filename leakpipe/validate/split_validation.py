"""One validation run: structure, streamed summary, cross-split checks, expectation suite.

Every failed check is collected into the report; the run only stops early when a split cannot
be read at all (missing, not HDF5, truncated, a read error while streaming, undecodable names),
because every later check needs the data.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from leakpipe.config import ValidateConfig
from leakpipe.validate.cross import content_in_one_group, cross_split_checks
from leakpipe.validate.pool import SummaryPool
from leakpipe.validate.results import KIND_STRUCTURE, CheckResult, failed
from leakpipe.validate.structure import SplitMeta, inspect_split
from leakpipe.validate.suite import run_suites
from leakpipe.validate.summary import SplitSummary, finish_split, start_split, summarise_split
from leakpipe.validate.validation_report import MIB, ValidationReport

log = logging.getLogger(__name__)


def validate_splits(paths: Mapping[str, Path], cfg: ValidateConfig,
                    progress: bool = True) -> ValidationReport:
    """Validate the split files ``paths`` (split name -> file, in train / val / test order)."""
    start = time.perf_counter()
    metas = {split: inspect_split(split, Path(path)) for split, path in paths.items()}
    checks = [c for meta in metas.values() for c in meta.checks]
    params = dataclasses.asdict(cfg)
    if any(not meta.readable for meta in metas.values()):
        return _report(checks, metas, {}, params, start, stopped=True)
    summaries: dict[str, SplitSummary] = {}
    for split, meta in metas.items():
        if not meta.summarisable:
            log.warning("validate %s: structure broken, per-file checks skipped", split)
    current = None                                        # the split being read, for errors
    with SummaryPool(cfg.workers) as pool:
        try:
            started = []                                  # all submitted first: no idle workers
            for current in (m for m in metas.values() if m.summarisable):
                started.append(start_split(current, cfg.read_mb, pool))
            for pending in started:
                current = pending.meta
                summaries[current.split] = finish_split(pending, cfg.constant_tol, progress)
        except (OSError, UnicodeDecodeError, BrokenProcessPool) as exc:
            checks.append(_read_error(current, exc))
            return _report(checks, metas, summaries, params, start, stopped=True)
    checks += run_suites(summaries, metas, cfg)
    checks += cross_split_checks(metas, summaries, cfg.max_listed)
    return _report(checks, metas, summaries, params, start)


def cross_split_failures(paths: Mapping[str, Path], cfg: ValidateConfig,
                         progress: bool = False) -> list[CheckResult]:
    """The failed structural and cross-split checks of ``paths`` alone (no expectation suite),
    and ``content_in_one_group`` (what pooling the splits needs): for a command that builds
    splits and cross-validates them at once (`leakpipe cv --source`), so that no recording,
    site or content is in two splits, nor one content under two groups."""
    metas = {split: inspect_split(split, Path(path)) for split, path in paths.items()}
    broken = [c for meta in metas.values() for c in meta.checks if not c.passed]
    if broken:
        return broken
    with SummaryPool(cfg.workers) as pool:
        summaries = {split: summarise_split(meta, read_mb=cfg.read_mb,
                                            constant_tol=cfg.constant_tol, pool=pool,
                                            progress=progress)
                     for split, meta in metas.items()}
    checks = [*cross_split_checks(metas, summaries, cfg.max_listed),
              content_in_one_group(metas, summaries, cfg.max_listed)]
    return [c for c in checks if not c.passed]


def _read_error(meta: SplitMeta, exc: BaseException) -> CheckResult:
    reason = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return failed("readable", meta.split, KIND_STRUCTURE,
                  f"{meta.path}: cannot read the data ({exc.__class__.__name__}: {reason})",
                  fatal=True)


def _report(checks: list[CheckResult], metas: Mapping[str, SplitMeta],
            summaries: Mapping[str, SplitSummary], params: dict, start: float,
            stopped: bool = False) -> ValidationReport:
    splits = {split: _split_info(meta, summaries.get(split)) for split, meta in metas.items()}
    timings = {f"{s}_seconds": round(summary.seconds, 3) for s, summary in summaries.items()}
    return ValidationReport(checks=checks, splits=splits, params=params, stopped=stopped,
                            seconds=time.perf_counter() - start,
                            bytes_read=sum(s.bytes_read for s in summaries.values()),
                            timings=timings)


def _split_info(meta: SplitMeta, summary: SplitSummary | None) -> dict:
    info = {"path": str(meta.path), "files": meta.n_files, "mib": round(meta.nbytes / MIB, 3),
            "dtype": meta.mel_dtype, "row_shape": list(meta.row_shape) or None,
            "summarised": summary is not None}
    if summary is not None:
        counts = summary.frame["class_name"].value_counts()
        names = [*(meta.class_names or ()), *sorted(set(counts.index) - set(meta.class_names
                                                                              or ()))]
        info["class_counts"] = {name: int(counts.get(name, 0)) for name in names}
        distinct = summary.frame.groupby("class_name")[["recording_id", "group"]].nunique()
        for key, column in (("recording_counts", "recording_id"), ("group_counts", "group")):
            found = distinct[column]
            info[key] = {name: int(found.get(name, 0)) for name in names}
        info["checksum"] = summary.checksum
    return info
