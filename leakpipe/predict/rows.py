"""The rows of `leakpipe predict` (its CSV) and of the served detector: one per recording.

A scored recording's row holds the verdict a person reads (``verdict``: LEAK, NOLEAK, UNCERTAIN
for a recording the domain check calls shifted, UNUSABLE without a call;
``leakpipe.decision.verdict``), the leak probability (the rule's score through the detector's
calibration, ``leakpipe.decision.calibration``), the model's call (``decision``, taken on the raw
score), the operating point on the same probability scale (``threshold``; both shown at
``DECIMALS`` digits such that ``leak_prob >= threshold`` is the call), the share of long
segments at or above the raw operating point, the long-segment timeline (the network's
probabilities, uncalibrated: the calibration maps a recording's rule score, not single
segments) and how much of the model's band
the recording covers: ``band_hz`` is its own Nyquist frequency (sample_rate / 2) and
``band_limited`` is true when that lies below the model's ``fmax``, i.e. when the mel bands
above ``band_hz`` see only the resampler's empty band rather than the pipe (a 4096 Hz logger
under the default 8192 Hz model: the 18 of 64 bands centred above 2048 Hz), and the domain
check (``leakpipe.decision.domain``): ``domain`` is ``in`` when the recording's band profile
(level and spectral shape) lies within the training recordings' range, ``shifted`` when its
distance ``domain_distance`` exceeds the threshold set on val (about 1 % of val recordings do),
with the main reason in ``domain_reason`` (``band``, ``level`` or ``shape`` and a few words),
and ``unknown`` under a detector written before detectors held the reference. A shifted
recording keeps its ``decision`` and ``leak_prob`` (the model's answer under its training
distribution, not a calibrated probability there); its ``verdict`` is UNCERTAIN and its
``notes`` say why and what to do. A recording that cannot be
read gets an ``error`` row, one whose signal cannot carry a decision (dead, or a check in
`build.quality.reject`) or whose format leakpipe does not read an ``unusable`` row: its reason
in ``notes``, no figures and no decision (never NOLEAK). A check that only flags a recording
is in the notes of its ``ok`` row.

The timeline is three lists in time order, one entry per long segment: its start in seconds
from the recording's start, the clip it belongs to (clips are numbered 0, 1, ... from the
start; two clips of a short recording overlap, so one instant can appear twice, once per clip)
and its leak probability. The served detector answers the lists as they are; `leakpipe
predict` writes the row without them (``CSV_COLUMNS``: one short line per recording) and the
timeline to a second CSV with one line per long segment (``timeline_rows``), so a reader of the
decisions never scrolls past hundreds of numbers.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from leakpipe.decision.domain import IN, SHIFTED, assess
from leakpipe.decision.domain_set import SetCheck, SetReference, set_check
from leakpipe.decision.verdict import (
    DECIMALS,
    call_fields,
    finite_or_blank,
    with_set_verdict,
    with_verdict,
)
from leakpipe.decision.voting import file_scores, long_segment_probs
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.features.mel import band_centers_hz
from leakpipe.files import csv_text, write_text_atomic

__all__ = ["COLUMNS", "CSV_COLUMNS", "DECIMALS", "SET_DISTANCE", "STATUS_ERROR", "STATUS_OK",
           "STATUS_UNUSABLE", "TIMELINE", "apply_set_verdict", "check_recording_set",
           "distances_of", "domain_path", "earlier_distances", "say_set_check",
           "write_set_check",
           "TIMELINE_COLUMNS", "Failed", "OutputWriter", "Prepared", "completed_rows",
           "error_row", "result_row", "start_outputs", "timeline_path", "timeline_rows"]

TIMELINE = ("long_starts_s", "long_clips", "long_probs")   # lists in the row, time order
COLUMNS = ("path", "status", "verdict", "leak_prob", "decision", "threshold", "rule", "prob_mode",
           "vote_fraction", "frac_long_over", "n_long", "duration_s", "band_hz", "band_limited",
           "domain", "domain_distance", "domain_reason", *TIMELINE, "notes")
CSV_COLUMNS = tuple(c for c in COLUMNS if c not in TIMELINE)   # predict's CSV: one per recording
TIMELINE_COLUMNS = ("path", "clip", "start_s", "long_prob")    # its timeline CSV: one per segment
STATUS_OK, STATUS_ERROR = "ok", "error"
STATUS_UNUSABLE = "unusable"   # read, but no decision on it: a refused signal check or format
# a recording-level row's distance for the set domain check (not a CSV column: it goes to the
# set check's JSON, so that --resume can check the whole set again)
SET_DISTANCE = "set_distance"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """Consecutive clips of one readable recording, turned into features: all of its clips, or
    one part of them (``last``: the final part; then the row can be written)."""

    path: Path
    mel: np.ndarray         # (clips, n_long, n_short, n_mels, n_frames) float32
    starts_s: np.ndarray    # (clips,) clip start in seconds
    duration_s: float       # of the whole recording
    band_hz: float          # the recording's own Nyquist frequency, sample_rate / 2
    notes: str = ""
    last: bool = True

    @property
    def segments(self) -> int:
        return int(np.prod(self.mel.shape[:3]))


@dataclass(frozen=True)
class Failed:
    """A recording without a decision: its one-line reason and its row's status."""

    path: Path
    reason: str
    status: str = STATUS_ERROR   # or STATUS_UNUSABLE


def result_row(prep: Prepared, starts_s: np.ndarray, seg_probs: np.ndarray,
               detector: Detector, profile: np.ndarray) -> dict[str, Any]:
    """The row of ``prep``'s recording from the (clips,) starts and (clips, L, S) probabilities
    of all its clips (every long segment of every clip votes together) and its (M,) band
    profile (``domain.band_profile`` over all its clips)."""
    voting, f = detector.voting, detector.features
    probs = seg_probs.reshape(1, -1, seg_probs.shape[-1])            # (1, clips * L, S)
    score = float(file_scores(probs, voting.rule, voting.vote_fraction)[0])
    long_probs = long_segment_probs(probs)[0]                        # (clips * L,)
    offsets = np.arange(seg_probs.shape[1]) * f.long_hop / f.sample_rate   # (L,)
    starts = np.round(starts_s[:, None] + offsets[None, :], DECIMALS).reshape(-1)  # (clips * L,)
    clips = np.repeat(np.arange(seg_probs.shape[0]), seg_probs.shape[1])  # (clips * L,)
    order = np.argsort(starts, kind="stable")       # time order; one instant: lower clip first
    return with_verdict({
            **_rule_fields(detector), "path": str(prep.path), "status": STATUS_OK,
            **call_fields(score, detector.threshold, detector.leak_prob(score),
                          detector.prob_threshold),
            "frac_long_over": round(float((long_probs >= detector.threshold).mean()), DECIMALS),
            "n_long": len(long_probs), "duration_s": round(prep.duration_s, DECIMALS),
            "band_hz": float(prep.band_hz), "band_limited": bool(prep.band_hz < f.fmax),
            **domain_fields(detector, profile, prep.band_hz),
            "long_starts_s": starts[order].tolist(), "long_clips": clips[order].tolist(),
            "long_probs": np.round(long_probs[order], DECIMALS).tolist(), "notes": prep.notes})


def domain_fields(detector: Detector, profile: np.ndarray, band_hz: float) -> dict[str, Any]:
    """``domain``, ``domain_distance`` (blank when unknown) and ``domain_reason`` of a recording
    with the (M,) band ``profile`` and its own Nyquist frequency ``band_hz``."""
    f = detector.features
    check = assess(detector.domain, profile, band_centers_hz(f.n_mels, f.fmin, f.fmax), band_hz)
    return {"domain": check.domain, "domain_distance": finite_or_blank(check.distance),
            "domain_reason": check.reason}


def error_row(failed: Failed, detector: Detector) -> dict[str, Any]:
    empty = {name: [] if name in TIMELINE else "" for name in COLUMNS}
    return with_verdict({**empty, **_rule_fields(detector), "path": str(failed.path),
                         "status": failed.status, "notes": failed.reason})


def timeline_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The timeline of one row (``TIMELINE_COLUMNS``), one dict per long segment in time order;
    none for an error row."""
    return [{"path": row["path"], "clip": clip, "start_s": start, "long_prob": prob}
            for start, clip, prob in zip(*(row[key] for key in TIMELINE), strict=True)]


def _rule_fields(detector: Detector) -> dict[str, Any]:
    voting = detector.voting
    return {"threshold": round(detector.prob_threshold, DECIMALS), "rule": voting.rule,
            "prob_mode": voting.prob_mode, "vote_fraction": voting.vote_fraction}


# -- predict's two CSV files ---------------------------------------------------------------------

def domain_path(out: Path) -> Path:
    """Where the set domain check of the CSV ``out`` goes: ``predictions.csv`` ->
    ``predictions_domain.json``, beside it."""
    out = Path(out)
    return out.with_name(f"{out.stem}_domain.json")


def distances_of(rows: Sequence[dict[str, Any]]) -> list[float]:
    """The ``domain_distance`` of every row that has one (blank: unknown or unreadable)."""
    return [float(row["domain_distance"]) for row in rows
            if row.get("domain_distance") not in ("", None)]


def write_set_check(out: Path, check: SetCheck, rows: Sequence[dict[str, Any]],
                    distances: dict[str, float] | None = None) -> None:
    """The run's set domain check and its per-recording counts, as JSON beside ``out``; with
    ``distances`` (path -> the distance the check read) those too."""
    counts = Counter(str(row.get("domain") or "") for row in rows)
    doc: dict[str, Any] = {"set": check.to_dict(), "recordings": {
        name: counts.get(name, 0) for name in ("in", "shifted", "unknown")}}
    if distances is not None:
        doc["distances"] = {path: d if math.isfinite(d) else None
                            for path, d in distances.items()}
    write_text_atomic(domain_path(out), json.dumps(doc, indent=1) + "\n")


def earlier_distances(out: Path) -> dict[str, float]:
    """The per-recording distances an earlier run into ``out`` wrote beside it ({} if none)."""
    try:
        doc = json.loads(domain_path(out).read_text())
        return {str(p): math.nan if d is None else float(d)
                for p, d in dict(doc.get("distances") or {}).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def check_recording_set(out: Path, reference: SetReference | None,
                        distances: dict[str, float],
                        columns: Sequence[str]) -> tuple[SetCheck, list[dict[str, str]]]:
    """The set domain check of the recordings of the CSV ``out`` (path -> distance, NaN when
    unknown; ``reference`` None: the detector keeps no val distances): its answer given to
    every row (``apply_set_verdict``) and written beside ``out``; the check and the rows."""
    check = set_check(reference, np.array(list(distances.values()), dtype=np.float64))
    rows = apply_set_verdict(out, check, columns)
    write_set_check(out, check, rows, distances)
    return check, rows


def apply_set_verdict(out: Path, check: SetCheck,
                      columns: Sequence[str] = CSV_COLUMNS) -> list[dict[str, str]]:
    """Rewrite the CSV ``out`` (every row written) with each row's verdict under the set's
    answer (``with_set_verdict``); returns the rows. One atomic replace: a crash leaves the
    rows as they were, and ``--resume`` applies the set answer again."""
    rows = [with_set_verdict(row, check.domain, check.p_value)
            for row in _whole_rows(Path(out), columns)]
    write_text_atomic(Path(out), csv_text(rows, columns))
    return rows


def say_set_check(check: SetCheck, out: Path, what: str = "") -> None:
    """The set check's line (first in predict's summary) and, for a shifted set, what it means
    for the rows. ``what`` replaces the line of an unknown answer (why there is none)."""
    line = what if what and check.domain not in (SHIFTED, IN) else check.line()
    print(f"predict: {line} -> {domain_path(out)}")
    if check.domain == SHIFTED:
        log.warning("predict: these recordings, taken together, are farther from the training "
                    "recordings than new sites of the training network are (set domain check "
                    "p = %.2g): every call reads UNCERTAIN (notes say why); leak_prob still "
                    "ranks them; check the calls against labelled recordings of this network "
                    "first", check.p_value)


def timeline_path(out: Path) -> Path:
    """Where the timeline of the CSV ``out`` goes: ``predictions.csv`` ->
    ``predictions_timeline.csv``, beside it."""
    out = Path(out)
    return out.with_name(f"{out.stem}_timeline.csv")


def _whole_rows(path: Path, columns: Sequence[str]) -> list[dict[str, str]]:
    """The whole rows of one of predict's CSVs (a line cut off by a crash is dropped); none when
    the file is absent."""
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != tuple(columns):
            raise DataError(f"{path}: not a `leakpipe predict` output of this version (columns "
                            "differ); choose another --out or drop --resume")
        return [row for row in reader if None not in row.values()]


def completed_rows(out: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The rows of the recordings an earlier run into ``out`` scored, and their timeline rows.

    A recording counts as scored when its row is whole, ``ok``, and the timeline file holds
    all ``n_long`` of its segments. A batch's timeline is written before its rows, so a crash
    in between leaves timeline rows without a row (dropped here), never a row without its
    timeline; a timeline file lost or cut short since only makes its recordings run again.
    A failed row (``error``, ``unusable``) is not kept: the file may have been fixed since.
    """
    rows = [row for row in _whole_rows(Path(out), CSV_COLUMNS) if row["status"] == STATUS_OK]
    timeline = _whole_rows(timeline_path(out), TIMELINE_COLUMNS)
    segments = Counter(row["path"] for row in timeline)
    kept = [row for row in rows
            if row["n_long"].isdigit() and segments[row["path"]] == int(row["n_long"])]
    done = {row["path"] for row in kept}
    return kept, [row for row in timeline if row["path"] in done]


def start_outputs(out: Path, rows: Sequence[dict[str, Any]],
                  timeline: Sequence[dict[str, Any]]) -> None:
    """Rewrite both files whole, atomically, with their headers and the rows kept from a
    resumed run (none for a new run)."""
    write_text_atomic(timeline_path(out), csv_text(timeline, TIMELINE_COLUMNS))
    write_text_atomic(Path(out), csv_text(rows, CSV_COLUMNS))


class OutputWriter:
    """Appends finished rows to ``out`` (``CSV_COLUMNS``) and their timelines to
    ``timeline_path(out)``, each batch flushed: the timeline first (see ``completed_rows``)."""

    def __init__(self, out: Path) -> None:
        self._timeline_file = timeline_path(out).open("a", newline="")
        self._rows_file = Path(out).open("a", newline="")
        self._timeline = csv.DictWriter(self._timeline_file, fieldnames=TIMELINE_COLUMNS,
                                        lineterminator="\n")
        self._rows = csv.DictWriter(self._rows_file, fieldnames=CSV_COLUMNS,
                                    lineterminator="\n", extrasaction="ignore")

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        self._timeline.writerows(line for row in rows for line in timeline_rows(row))
        self._timeline_file.flush()
        self._rows.writerows(rows)
        self._rows_file.flush()

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._timeline_file.close()
        self._rows_file.close()
