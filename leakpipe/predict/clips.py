"""`leakpipe predict` with a `cnn` detector: the recordings scored a batch at a time.

One row per recording (``predict.scoring`` reads and scores the recordings, ``predict.rows``
makes the rows and the two CSV files they go to: one short line per recording; the timeline
beside it, one line per long segment): the verdict (LEAK, NOLEAK, UNCERTAIN when the domain
check calls the recording shifted, UNUSABLE without a call), the calibrated leak probability
and the threshold on that scale (the model's call, ``decision``, is LEAK <=> leak_prob >=
threshold), the rule, the share of long segments at or above the raw threshold, whether the
recording's band is narrower than the model's (``band_hz``, ``band_limited``), whether it is
like the training recordings (``domain``, ``domain_distance``, ``domain_reason``) and the
long-segment probabilities over time (a timeline, in time order with each segment's clip). A
recording that cannot be read gets an ``error`` row with its reason in ``notes``; one that
fails build's signal checks as the detector's `build.quality` refuses them (dead, always) an
``unusable`` row, with no decision (``predict.inputs``). Once every row is in, the set domain
check of all of them (``decision.domain_set.set_check``: are they, taken together, farther from
the training recordings than val's new sites are?) goes to a JSON beside the CSV.

Rows and timelines are appended (and flushed) after every batch of recordings, so ``resume``
continues an interrupted run by skipping the recordings already scored in the output (a failed
row is tried again: the file may have been fixed).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from leakpipe.decision.domain_set import SetCheck, set_check
from leakpipe.decision.verdict import LEAK, verdict_counts
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.files import os_problem
from leakpipe.predict.inputs import PREDICT_SUFFIXES, find_recordings
from leakpipe.predict.rows import (
    STATUS_ERROR,
    STATUS_UNUSABLE,
    OutputWriter,
    apply_set_verdict,
    completed_rows,
    distances_of,
    domain_path,
    start_outputs,
    write_set_check,
)
from leakpipe.predict.rules import ScoringRules, batch_budget
from leakpipe.predict.scoring import score_recordings
from leakpipe.predict.target import DetectorStamp, check_resume, write_stamp
from leakpipe.runtime import Runtime

__all__ = ["PredictSummary", "predict"]

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

def predict(paths: Sequence[Path], detector: Detector, out: Path, *, runtime: Runtime,
            rules: ScoringRules, resume: bool = False, progress: bool = True,
            max_batch_segments: int | None = None,
            stamp: DetectorStamp | None = None) -> PredictSummary:
    """Score every recording under ``paths`` into the CSV ``out`` and its timeline CSV
    (``timeline_path(out)``).

    ``max_batch_segments`` overrides the rules' cap on segments per forward pass. ``stamp``
    names the detector's file: it is recorded beside ``out``, and ``resume`` continues only a
    CSV recorded with the same one (``predict.target``).
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

