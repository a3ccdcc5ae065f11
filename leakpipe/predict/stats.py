"""`leakpipe predict` with a `logger_stats` detector: one verdict per recording from its level
statistics (and the CSV loop and columns that a `fused` detector's rows share:
``leakpipe.predict.fused``).

Each recording is measured as `build` measured the training ones (decoded once, block by block,
at its own rate; ``leakpipe.stats_detector.measure``): the statistics, then build's signal
checks. A check of ``quality.reject`` (a dead logger above all) makes the row ``unusable`` with
its reason, never ``NOLEAK``; other failed checks go to ``notes``. The row's ``leak_prob`` is the
calibrated probability and ``threshold`` the operating point on that same scale (one decision
scale in every column: ``decision``, the model's call, is LEAK exactly when the shown
``leak_prob`` reaches the shown ``threshold``), ``raw_score`` the model's raw probability (the
scale the call is taken on); ``top_statistic`` names the statistic that moved the score most
(``leakpipe explain`` gives them all). ``domain``, ``domain_distance`` and ``domain_reason`` are
the statistics' domain check (``decision.stats_domain``, as the served detector answers it), and
``verdict`` what a person reads (``decision.verdict``: UNCERTAIN for a shifted recording, whose
notes then say why and what to do; UNUSABLE without a call).

After the rows, the recordings are checked as a set where the detector keeps a set reference
(``set_reference``: a logger_stats detector's held-out distances of the recordings it was
fitted on, a fused detector's CNN part's val distances; an older file has none, and predict
says so), and a shifted set's calls read UNCERTAIN (``predict.rows.check_recording_set``).

The output contract is predict's (``predict.target``): the recordings and ``--out`` checked
first, the detector recorded beside the CSV, ``--resume`` continuing only a CSV of the same
detector and scoring again every row that did not end ``ok``.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from leakpipe.audio.clips import AudioError
from leakpipe.audio.opening import open_audio, unread_format
from leakpipe.decision.domain_set import SetReference
from leakpipe.decision.verdict import (
    LEAK,
    UNCERTAIN,
    call_fields,
    counts_text,
    finite_or_blank,
    verdict_counts,
    with_verdict,
)
from leakpipe.errors import DataError
from leakpipe.files import file_sha256, os_problem, write_csv_atomic
from leakpipe.predict.inputs import PREDICT_SUFFIXES, find_recordings
from leakpipe.predict.rows import (
    DECIMALS,
    SET_DISTANCE,
    STATUS_ERROR,
    STATUS_OK,
    STATUS_UNUSABLE,
    check_recording_set,
    earlier_distances,
    say_set_check,
)
from leakpipe.predict.target import DetectorStamp, check_resume, write_stamp
from leakpipe.stats_detector import Measured, StatsDetector, measure

log = logging.getLogger(__name__)

RAW_DECIMALS = 6           # of the raw score: a machine's figure, the call is taken on it

COLUMNS = ("path", "status", "verdict", "leak_prob", "decision", "threshold", "raw_score",
           "kind", "sample_rate", "duration_s", "top_statistic", "domain", "domain_distance",
           "domain_reason", "notes")


class RecordingDetector(Protocol):
    """A detector of one verdict per recording (logger_stats, fused), as this loop reads it."""

    kind: str

    @property
    def prob_threshold(self) -> float: ...

    @property
    def set_reference(self) -> SetReference | None: ...


def stamp_of(model: str, file: Path, detector: RecordingDetector) -> DetectorStamp:
    return DetectorStamp(file_sha256(file), model, detector.kind,
                         round(detector.prob_threshold, DECIMALS))


def blank_row(path: Path, detector: RecordingDetector) -> dict[str, Any]:
    """A recording's row before it is measured: ``ok``, no figures."""
    return {**dict.fromkeys(COLUMNS, ""), "path": str(path), "kind": detector.kind,
            "threshold": round(detector.prob_threshold, DECIMALS), "status": STATUS_OK}


def stats_domain_fields(detector: StatsDetector, stats: np.ndarray) -> dict[str, Any]:
    """``domain``, ``domain_distance`` (blank: none) and ``domain_reason`` of a recording's
    (S_all,) statistics under a logger_stats detector's train means, scales and missing
    shares (``StatsDetector.domain``)."""
    check = detector.domain(stats)
    return {"domain": check.domain, "domain_distance": finite_or_blank(check.distance),
            "domain_reason": check.reason}


def top_statistic(moved: dict[str, float]) -> str:
    """The statistic that moved the statistics' logit most, and by how much."""
    top = max(moved, key=lambda k: abs(moved[k]))
    return f"{top} {moved[top]:+.2f}"


def score_file(path: Path, detector: StatsDetector) -> dict[str, Any]:
    """One recording's row."""
    row = blank_row(path, detector)
    if reason := unread_format(path):
        return with_verdict({**row, "status": STATUS_UNUSABLE, "notes": reason})
    try:
        fields, _ = measured_fields(open_audio(path), detector)
    except AudioError as exc:
        return with_verdict({**row, "status": STATUS_ERROR, "notes": str(exc)})
    except OSError as exc:
        return with_verdict({**row, "status": STATUS_ERROR,
                             "notes": f"{path}: {os_problem(path, exc)}"})
    return with_verdict({**row, **fields})


def measured_fields(source: Any, detector: StatsDetector) -> tuple[dict[str, Any], Measured]:
    """An ``AudioSource``'s row fields under a logger_stats detector (a file's, or a served
    request's: one code for both), and the measurement; raises ``AudioError`` / ``OSError``."""
    measured = measure(source, detector)
    fields: dict[str, Any] = {"sample_rate": measured.rate,
                              "duration_s": round(measured.seconds, 3)}
    if measured.stats is None:
        return {**fields, "status": STATUS_UNUSABLE, "notes": "; ".join(
            measured.problems) + " (build.quality.reject: no decision)"}, measured
    score = float(detector.probability(measured.stats[None, :])[0])
    return {**fields, "raw_score": round(score, RAW_DECIMALS),
            **call_fields(score, detector.threshold, detector.leak_prob(score),
                          detector.prob_threshold),
            "top_statistic": top_statistic(detector.contributions(measured.stats)),
            **stats_domain_fields(detector, measured.stats),
            SET_DISTANCE: detector.domain(measured.stats).distance,   # the set check's D
            "notes": "; ".join(measured.flags)}, measured


def _kept_rows(out: Path) -> list[dict[str, str]]:
    """The rows of an earlier run that ended ``ok`` (the others are scored again)."""
    if not os.path.lexists(out):
        return []
    with Path(out).open(newline="") as handle:
        reader = csv.DictReader(handle)
        if list(reader.fieldnames or ()) != list(COLUMNS):
            raise DataError(f"--resume: {out} is not a recording-level predictions table "
                            "(its columns differ); --force starts it over")
        return [row for row in reader if row["status"] == STATUS_OK]


def run_predict_stats(paths: Sequence[Path], detector: RecordingDetector, out: Path, *,
                      stamp: DetectorStamp, resume: bool, progress: bool,
                      score: Callable[[Path], dict[str, Any]]) -> dict[str, int]:
    """Score every recording under ``paths`` into the CSV ``out``; the counts. ``score`` gives
    a recording's row (``COLUMNS``): ``score_file`` of a logger_stats detector, a fused
    detector's ``predict.fused.score_fused_file``, or a kind's own."""
    start = time.perf_counter()
    if resume:
        check_resume(out, stamp)
    kept = _kept_rows(out) if resume else []
    done = {row["path"] for row in kept}
    todo = [p for p in find_recordings(paths, PREDICT_SUFFIXES) if str(p) not in done]
    try:
        write_stamp(out, stamp)
        write_csv_atomic(out, kept, columns=COLUMNS)
    except OSError as exc:
        raise DataError(f"--out {out}: cannot be written ({os_problem(out, exc)})") from None
    counts = {"written": 0, "unusable": 0, "errors": 0, "kept": len(kept)}
    before = earlier_distances(out) if resume else {}
    distances = {path: before.get(path, math.nan) for path in done}
    with Path(out).open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        for path in tqdm(todo, desc="predict", unit="rec", disable=not progress):
            row = score(path)
            distances[str(path)] = float(row.pop(SET_DISTANCE, math.nan))
            writer.writerow(row)
            handle.flush()
            counts["written"] += 1
            counts["unusable"] += row["status"] == STATUS_UNUSABLE
            counts["errors"] += row["status"] == STATUS_ERROR
    check, rows = check_recording_set(out, detector.set_reference, distances, COLUMNS)
    verdicts = verdict_counts(row for row in rows if row["path"] not in done)
    say_set_check(check, out, "" if detector.set_reference is not None else (
        f"set domain check: none (a {detector.kind} detector keeps no val distances to compare "
        "a set with)"))
    print(f"predict: {counts['written']} recordings ({counts_text(verdicts)}, "
          f"{counts['unusable']} unusable, {counts['errors']} unreadable, {counts['kept']} kept "
          f"from before) in {time.perf_counter() - start:.1f} s -> {out} ({detector.kind} "
          f"detector: leak_prob threshold {round(detector.prob_threshold, DECIMALS):.4f})")
    return {**counts, "leaks": verdicts[LEAK], "uncertain": verdicts[UNCERTAIN]}


__all__ = ["COLUMNS", "RAW_DECIMALS", "RecordingDetector", "blank_row", "measured_fields",
           "run_predict_stats", "score_file", "stamp_of", "stats_domain_fields", "top_statistic"]
