"""A served request's rows as recordings, and the answer's rows as JSON: the same for every kind.

``request_sources`` reads each input row (``waveform``, ``sample_rate``, optional ``id``) into an
in-memory ``AudioSource``, or a ``Failed`` with the reason said in the client's terms (the rate
as it was sent); ``served_row`` turns one kind's row into the answer's columns (``id`` for
``path``, the timeline lists as they are, None for a figure the row does not have).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from leakpipe.audio.clips import AudioError
from leakpipe.audio.opening import AudioSource, waveform_source
from leakpipe.decision.domain import SHIFTED
from leakpipe.decision.domain_set import SetReference, min_set_size, set_check
from leakpipe.decision.verdict import with_set_verdict
from leakpipe.predict.rows import COLUMNS, SET_DISTANCE, TIMELINE, Failed
from leakpipe.predict.stats import COLUMNS as RECORDING_COLUMNS

# predict's columns of every kind: a cnn detector's, then those of the kinds of one verdict
# per recording (predict.stats.COLUMNS) that a cnn row has not; a column a kind has not is
# empty (null)
OUTPUT_COLUMNS = ("id", *(c for c in COLUMNS if c != "path"),
                  *(c for c in RECORDING_COLUMNS if c not in COLUMNS))
NUMBER_COLUMNS = ("leak_prob", "threshold", "vote_fraction", "frac_long_over", "duration_s",
                  "band_hz", "domain_distance", "raw_score", "sample_rate")
TEXT_COLUMNS = ("id", "status", "verdict", "decision", "rule", "prob_mode", "domain",
                "domain_reason", "notes", "kind", "top_statistic")


def request_sources(frame: pd.DataFrame) -> tuple[list[str], list[AudioSource | Failed]]:
    """Each input row's id and its recording (or why it cannot be one), in order."""
    ids = _ids(frame)
    sources: list[AudioSource | Failed] = []
    for i, name in enumerate(ids):
        try:
            sources.append(waveform_source(name, _samples(frame, i, name),
                                           _rate(frame, i, name)))
        except AudioError as exc:
            sources.append(Failed(Path(name), str(exc)))
    return ids, sources


def _ids(frame: pd.DataFrame) -> list[str]:
    if "id" not in frame.columns:
        return [f"recording-{i}" for i in range(len(frame))]
    return [str(v) if isinstance(v, str) and v else f"recording-{i}"
            for i, v in enumerate(frame["id"])]


def _samples(frame: pd.DataFrame, i: int, name: str) -> np.ndarray:
    if "waveform" not in frame.columns:
        raise AudioError(f"{name}: no 'waveform' column in the request")
    value = frame["waveform"].iloc[i]
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise AudioError(f"{name}: waveform is not a list of numbers") from None


def _rate(frame: pd.DataFrame, i: int, name: str) -> int:
    if "sample_rate" not in frame.columns:
        raise AudioError(f"{name}: no 'sample_rate' column in the request")
    value = frame["sample_rate"].iloc[i]
    if isinstance(value, bool | np.bool_) or \
            not isinstance(value, int | np.integer | float | np.floating) or \
            not math.isfinite(value) or value != int(value) or value <= 0:
        raise AudioError(f"{name}: sample_rate must be a positive whole number of Hz, got "
                         f"{as_sent(value)}")
    return int(value)


def as_sent(value: Any) -> str:
    """A request's value as the client wrote it in JSON (``0``, ``8000.5``, ``"8k"``,
    ``null``), not as pandas holds it (``np.int64(0)``, ``nan``): the client knows only the
    former."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    return json.dumps(value, default=str)


def served_row(row: dict[str, Any], name: str) -> dict[str, Any]:
    """A kind's row for JSON: ``id`` for ``path``, the timeline lists as they are, None for
    blanks (a figure an error row, or a kind, does not have)."""
    out: dict[str, Any] = {"id": name}
    for key in OUTPUT_COLUMNS[1:]:
        value = row.get(key, "")
        if key in TIMELINE:
            value = list(value)
        elif (value is None or value == "") and key not in TEXT_COLUMNS:
            value = None
        elif value is None:
            value = ""
        out[key] = value
    return out


def with_request_set(rows: list[dict[str, Any]],
                     reference: SetReference | None) -> list[dict[str, Any]]:
    """A request's rows under the set domain check of its recordings, as predict checks a
    folder: each row's ``SET_DISTANCE`` (taken off) against ``reference``'s val distances; a
    shifted set makes every call UNCERTAIN (``with_set_verdict``). Checked only with enough
    recordings with a distance to be able to reach the check's level (``min_set_size``: 2
    against the default 252 val recordings); otherwise, and without a reference, the rows stay
    as they are."""
    distances = np.array([float(row.pop(SET_DISTANCE, math.nan)) for row in rows])
    known = np.isfinite(distances).sum()
    if reference is None or not reference.val_distances.size or \
            known < min_set_size(reference.val_distances.size):
        return rows
    check = set_check(reference, distances)
    if check.domain != SHIFTED:
        return rows
    return [with_set_verdict(row, check.domain, check.p_value) for row in rows]


__all__ = ["NUMBER_COLUMNS", "OUTPUT_COLUMNS", "TEXT_COLUMNS", "as_sent", "request_sources",
           "served_row", "with_request_set"]
