"""`leakpipe predict` with a `logger_stats` detector: one verdict per recording from its level
statistics (and the CSV loop and columns that a `fused` detector's rows share:
``leakpipe.predict_fused``).

Each recording is measured as `build` measured the training ones (decoded once, block by block,
at its own rate; ``leakpipe.stats_detector.measure``): the statistics, then build's signal
checks. A check of ``quality.reject`` (a dead logger above all) makes the row ``unusable`` with
its reason, never ``NOLEAK``; other failed checks go to ``notes``. The row's ``leak_prob`` is the
calibrated probability and ``threshold`` the operating point on that same scale (one decision
scale in every column), ``score`` the model's raw probability; ``top_statistic`` names the
statistic that moved the score most (``leakpipe explain`` gives them all).

The output contract is predict's (``predict_target``): the recordings and ``--out`` checked
first, the detector recorded beside the CSV, ``--resume`` continuing only a CSV of the same
detector and scoring again every row that did not end ``ok``.
"""

from __future__ import annotations

import csv
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from leakpipe.audio.clips import AudioError
from leakpipe.audio.io import open_audio
from leakpipe.constants import DECISION_NAMES
from leakpipe.errors import DataError
from leakpipe.files import file_sha256, os_problem, write_csv_atomic
from leakpipe.predict_inputs import PREDICT_SUFFIXES, find_recordings, unread_format
from leakpipe.predict_rows import DECIMALS, STATUS_ERROR, STATUS_OK, STATUS_UNUSABLE
from leakpipe.predict_target import DetectorStamp, check_resume, write_stamp
from leakpipe.stats_detector import StatsDetector, measure

log = logging.getLogger(__name__)

COLUMNS = ("path", "status", "leak_prob", "decision", "threshold", "score", "kind",
           "sample_rate", "duration_s", "top_statistic", "notes")


class RecordingDetector(Protocol):
    """A detector of one verdict per recording (logger_stats, fused), as this loop reads it."""

    kind: str

    @property
    def prob_threshold(self) -> float: ...


def stamp_of(model: str, file: Path, detector: RecordingDetector) -> DetectorStamp:
    return DetectorStamp(file_sha256(file), model, detector.kind, detector.prob_threshold)


def blank_row(path: Path, detector: RecordingDetector) -> dict[str, Any]:
    """A recording's row before it is measured: ``ok``, no figures."""
    return {"path": str(path), "kind": detector.kind,
            "threshold": round(detector.prob_threshold, DECIMALS), "status": STATUS_OK,
            "leak_prob": "", "decision": "", "score": "", "sample_rate": "", "duration_s": "",
            "top_statistic": "", "notes": ""}


def top_statistic(moved: dict[str, float]) -> str:
    """The statistic that moved the statistics' logit most, and by how much."""
    top = max(moved, key=lambda k: abs(moved[k]))
    return f"{top} {moved[top]:+.2f}"


def score_file(path: Path, detector: StatsDetector) -> dict[str, Any]:
    """One recording's row."""
    row = blank_row(path, detector)
    if reason := unread_format(path):
        return {**row, "status": STATUS_UNUSABLE, "notes": reason}
    try:
        measured = measure(open_audio(path), detector)
    except AudioError as exc:
        return {**row, "status": STATUS_ERROR, "notes": str(exc)}
    except OSError as exc:
        return {**row, "status": STATUS_ERROR, "notes": f"{path}: {os_problem(path, exc)}"}
    row.update(sample_rate=measured.rate, duration_s=round(measured.seconds, 3))
    if measured.stats is None:
        return {**row, "status": STATUS_UNUSABLE,
                "notes": "; ".join(measured.problems) + " (build.quality.reject: no decision)"}
    score = float(detector.probability(measured.stats[None, :])[0])
    return {**row, "score": round(score, 6),
            "leak_prob": round(detector.leak_prob(score), DECIMALS),
            "decision": DECISION_NAMES[int(score >= detector.threshold)],
            "top_statistic": top_statistic(detector.contributions(measured.stats)),
            "notes": "; ".join(measured.flags)}


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
                      score: Callable[[Path], dict[str, Any]] | None = None) -> dict[str, int]:
    """Score every recording under ``paths`` into the CSV ``out``; the counts. ``score`` gives
    a recording's row (``COLUMNS``); by default ``score_file`` of a logger_stats detector."""
    start = time.perf_counter()
    if score is None:
        assert isinstance(detector, StatsDetector)
        score = functools.partial(score_file, detector=detector)
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
    counts = {"written": 0, "leaks": 0, "unusable": 0, "errors": 0, "kept": len(kept)}
    with Path(out).open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        for path in tqdm(todo, desc="predict", unit="rec", disable=not progress):
            row = score(path)
            writer.writerow(row)
            handle.flush()
            counts["written"] += 1
            counts["leaks"] += row["decision"] == DECISION_NAMES[1]
            counts["unusable"] += row["status"] == STATUS_UNUSABLE
            counts["errors"] += row["status"] == STATUS_ERROR
    print(f"predict: {counts['written']} recordings ({counts['leaks']} LEAK, "
          f"{counts['unusable']} unusable, {counts['errors']} unreadable, {counts['kept']} kept "
          f"from before) in {time.perf_counter() - start:.1f} s -> {out} ({detector.kind} "
          f"detector: leak_prob threshold {detector.prob_threshold:.4f})")
    return counts


__all__ = ["COLUMNS", "RecordingDetector", "blank_row", "run_predict_stats", "score_file",
           "stamp_of", "top_statistic"]
