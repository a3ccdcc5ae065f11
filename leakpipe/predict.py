"""`leakpipe predict`: leak decisions for new recordings with a saved detector.

One row per recording (``leakpipe.predict_scoring`` reads and scores a CNN detector's
recordings, ``leakpipe.predict_rows`` makes the rows and the two CSV files they go to: one
short line per recording; the timeline beside it, one line per long segment): the verdict
(LEAK, NOLEAK, UNCERTAIN when the domain check calls the recording shifted, UNUSABLE without a
call), the calibrated leak probability and the threshold on that scale (the model's call,
``decision``, is LEAK <=> leak_prob >= threshold), the rule, the share of long segments at or
above the raw threshold, whether the recording's band is narrower than the model's
(``band_hz``, ``band_limited``), whether it is like the training recordings (``domain``,
``domain_distance``, ``domain_reason``) and the long-segment probabilities over time (a
timeline, in time order with each segment's clip). A recording that cannot be read gets an
``error`` row with its reason in ``notes``; one that fails build's signal checks as the
detector's `build.quality` refuses them (dead, always) an ``unusable`` row, with no decision
(``leakpipe.predict_inputs``, which also selects, reads and checks the recordings). Once every
row is in, the set domain check of all of them (``decision.domain_set.set_check``: are they,
taken together, farther from the training recordings than val's new sites are?) goes to a JSON
beside the CSV.

What the command refuses before it scores anything, each with one line and a non-zero exit
(``leakpipe.predict_target``): a path that is not there or a selection without a recording,
an ``--out`` that is one of the recordings, exists (without ``--resume`` or ``--force``) or
cannot be written, and ``--resume`` of a CSV that another detector wrote.

``run_predict`` is what `leakpipe predict` calls: the runtime, the detector (a file or an
MLflow model URI), its scoring rules (``leakpipe.predict_rules``), ``predict``, one summary
line; a detector of the logger_stats or fused kind writes its own rows instead
(``predict_stats``, ``predict_fused``).

Rows and timelines are appended (and flushed) after every batch of recordings, so ``resume``
continues an interrupted run by skipping the recordings already scored in the output (a failed
row is tried again: the file may have been fixed).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from leakpipe import tracking
from leakpipe.allocator import retain_freed_memory
from leakpipe.decision.domain_set import SetCheck, set_check
from leakpipe.decision.verdict import DECIMALS, LEAK, counts_text, verdict_counts
from leakpipe.detector import Detector, load_detector
from leakpipe.errors import DataError
from leakpipe.files import os_problem
from leakpipe.predict_fused import run_predict_fused
from leakpipe.predict_inputs import PREDICT_SUFFIXES, find_recordings, select_recordings
from leakpipe.predict_rows import (
    STATUS_ERROR,
    STATUS_UNUSABLE,
    OutputWriter,
    apply_set_verdict,
    completed_rows,
    distances_of,
    domain_path,
    say_set_check,
    start_outputs,
    timeline_path,
    write_set_check,
)
from leakpipe.predict_rules import ScoringRules, batch_budget, scoring_rules
from leakpipe.predict_scoring import clip_scoring, score_recordings
from leakpipe.predict_stats import run_predict_stats, stamp_of
from leakpipe.predict_target import (
    DetectorStamp,
    check_resume,
    check_target,
    stamp_path,
    write_stamp,
)
from leakpipe.runtime import Runtime, make_runtime
from leakpipe.stats_detector import FusedDetector, StatsDetector, load_any_detector

__all__ = ["PredictSummary", "load", "predict", "resolve_model", "run_predict"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictSummary:
    written: int
    skipped: int
    errors: int
    unusable: int
    leaks: int                    # verdict LEAK (in domain)
    seconds: float
    domain_set: SetCheck          # the set domain check over every row in the output
    verdicts: Counter[str] = field(default_factory=Counter)   # ``verdict_counts`` of the rows


def resolve_model(spec: str) -> Path:
    """A local detector file for a path or an MLflow URI (``models:/...``, ``runs:/...``)."""
    return tracking.download_model(spec) if tracking.is_model_uri(spec) else Path(spec)


# -- the run ---------------------------------------------------------------------------------

def predict(paths: Sequence[Path], detector: Detector, out: Path, *, runtime: Runtime,
            rules: ScoringRules, resume: bool = False, progress: bool = True,
            max_batch_segments: int | None = None,
            stamp: DetectorStamp | None = None) -> PredictSummary:
    """Score every recording under ``paths`` into the CSV ``out`` and its timeline CSV
    (``timeline_path(out)``).

    ``max_batch_segments`` overrides the rules' cap on segments per forward pass. ``stamp``
    names the detector's file: it is recorded beside ``out``, and ``resume`` continues only a
    CSV recorded with the same one (``predict_target``).
    """
    start = time.perf_counter()
    if resume and stamp is not None:
        check_resume(out, stamp)
    kept, kept_timeline = completed_rows(out) if resume else ([], [])
    done = {row["path"] for row in kept}
    todo = [p for p in find_recordings(paths, PREDICT_SUFFIXES) if str(p) not in done]
    try:
        write_stamp(out, stamp)                 # before the rows it names
        start_outputs(out, kept, kept_timeline)
        domain_path(out).unlink(missing_ok=True)    # written again once every row is in
    except OSError as exc:
        raise DataError(f"--out {out}: cannot be written ({os_problem(out, exc)})") from None
    model = detector.inference_model().to(runtime.device)
    budget = batch_budget(detector, rules, runtime, max_batch_segments)
    counts = {"written": 0, "errors": 0, "unusable": 0}
    verdicts: Counter[str] = Counter()
    summary_rows = [{k: row[k] for k in ("domain", "domain_distance")} for row in kept]
    with OutputWriter(out) as writer, \
            tqdm(total=len(todo), desc="predict", unit="rec", disable=not progress) as bar:
        for finished in score_recordings(todo, detector, model, runtime=runtime, budget=budget,
                                         min_fraction=rules.min_clip_fraction,
                                         quality=rules.quality):
            writer.write(finished)
            _count(counts, finished)
            verdicts += verdict_counts(finished)
            summary_rows += [{k: row[k] for k in ("domain", "domain_distance")}
                             for row in finished]
            bar.update(len(finished))
    domain_set = set_check(detector.domain, np.asarray(distances_of(summary_rows)))
    rows = apply_set_verdict(out, domain_set)
    verdicts = verdict_counts(row for row in rows if row["path"] not in done)
    write_set_check(out, domain_set, summary_rows)
    return PredictSummary(written=counts["written"], skipped=len(done), errors=counts["errors"],
                          unusable=counts["unusable"], leaks=verdicts[LEAK],
                          seconds=time.perf_counter() - start, domain_set=domain_set,
                          verdicts=verdicts)


def _count(counts: dict[str, int], rows: list[dict[str, Any]]) -> None:
    counts["written"] += len(rows)
    counts["errors"] += sum(row["status"] == STATUS_ERROR for row in rows)
    counts["unusable"] += sum(row["status"] == STATUS_UNUSABLE for row in rows)


def load(spec: str) -> Detector:
    """The detector named by a path or an MLflow model URI."""
    return load_detector(resolve_model(spec))


def run_predict(paths: Sequence[Path], model: str, out: Path, params: Path, *,
                device: str = "auto", resume: bool = False, force: bool = False,
                progress: bool = True, max_batch_segments: int | None = None) -> int:
    """The whole command; returns the exit code (errors raise ``LeakpipeError``).

    The recordings and ``out`` are checked before the detector is loaded (``predict_target``);
    ``force`` replaces an existing ``out``, ``resume`` continues it.
    """
    recordings = select_recordings(paths)
    check_target(out, recordings, resume=resume, force=force)
    runtime = make_runtime(device, "auto", device_key="--device")
    retain_freed_memory()                 # CPU inference reuses its activation buffers
    file = resolve_model(model)
    detector = load_any_detector(file)
    if isinstance(detector, StatsDetector):          # one verdict from the statistics
        run_predict_stats(paths, detector, out, stamp=stamp_of(model, file, detector),
                          resume=resume, progress=progress)
        return 0
    if isinstance(detector, FusedDetector):          # one verdict from clips and statistics
        scoring = clip_scoring(detector.cnn, scoring_rules(detector.cnn, params), runtime,
                               max_batch_segments)
        run_predict_fused(paths, detector, out, scoring=scoring,
                          stamp=stamp_of(model, file, detector), resume=resume,
                          progress=progress)
        return 0
    summary = predict(paths, detector, out, runtime=runtime,      # folders listed again
                      rules=scoring_rules(detector, params), resume=resume,
                      progress=progress, max_batch_segments=max_batch_segments,
                      stamp=DetectorStamp.of(model, file, detector))
    say_set_check(summary.domain_set, out)
    print(f"predict: {summary.written} recordings ({counts_text(summary.verdicts)}, "
          f"{summary.unusable} unusable, {summary.errors} unreadable, {summary.skipped} kept "
          f"from before) in {summary.seconds:.1f} s -> {out}, timeline {timeline_path(out)}, "
          f"detector {stamp_path(out)} (cnn detector, rule {detector.voting.rule}: leak_prob "
          f"threshold {round(detector.prob_threshold, DECIMALS):.4f})")
    return 0
