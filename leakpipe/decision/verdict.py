"""The verdict a person reads beside the model's call, and the numbers shown on one scale.
Pure Python.

Every detector kind takes its call on its own raw score (a CNN's rule score, a logger_stats
model's probability, a fused stacker's probability) against the raw threshold chosen on val.
What a person reads is the calibrated ``leak_prob`` and the same operating point through the
same calibration, ``threshold``: the calibration is increasing, so ``leak_prob >= threshold``
is the call. Shown at ``DECIMALS`` digits, rounding could tie a NOLEAK's probability with the
threshold; ``shown`` moves such a probability down by one last digit (and a LEAK's never below
the threshold), so the rounded numbers a person compares still give the call, and the same
numbers go to the CSV, the served answer and explain.

``verdict`` joins the call with what the recording is:

- ``UNUSABLE``: no call (a refused signal, a dead logger above all, or a recording that cannot
  be read or used): its ``status`` says which;
- ``UNCERTAIN``: the domain check says the recording is unlike the training recordings
  (``domain`` ``shifted``): the model's call (``decision``) and ``leak_prob`` are kept, but
  ``leak_prob`` is then the model's answer under its training distribution, not a calibrated
  probability, and ``shifted_note`` says why and what to do (cross-validate on labelled
  recordings of that network, ``CV_COMMAND``);
- otherwise the call itself, ``LEAK`` or ``NOLEAK``.

``with_set_verdict`` adds what the recordings say taken together: when the set domain check
(``leakpipe.decision.domain_set``) calls the whole set shifted, every row with a call reads
``UNCERTAIN`` too, and ``set_note`` says so in its notes. Why the whole set: a sensor mount
ringing in the leak band colours every recording of a network a little, too little for any one
recording's check, and there the calls at the val operating point went wrong together (the
false-alarm rate more than tripled on the simulated mounts, docs/evaluation.md "The set
verdict"). ``decision`` and ``leak_prob`` stay in the row: the model still ranks the recordings.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.domain import BAND, SHIFTED

NOLEAK, LEAK = DECISION_NAMES
UNUSABLE, UNCERTAIN = "UNUSABLE", "UNCERTAIN"
VERDICTS = (LEAK, NOLEAK, UNCERTAIN, UNUSABLE)
DECIMALS = 4                  # digits of leak_prob and threshold wherever they are shown
CV_COMMAND = ("leakpipe cv --source <labelled.csv: path,class,group of this network's "
              "recordings> --out <folder>")
RATE_OPTION = "--sample-rate <the loggers' rate, Hz>"    # for a recording out of band


def shown(leak_prob: float, prob_threshold: float, leak: bool) -> tuple[float, float]:
    """``leak_prob`` and ``prob_threshold`` at ``DECIMALS`` digits such that the shown
    probability reaches the shown threshold exactly when the call is LEAK."""
    threshold = round(float(prob_threshold), DECIMALS)
    prob = round(float(leak_prob), DECIMALS)
    if leak:
        return max(prob, threshold), threshold
    return min(prob, round(threshold - 10.0 ** -DECIMALS, DECIMALS)), threshold


def call_fields(raw_score: float, raw_threshold: float, leak_prob: float,
                prob_threshold: float) -> dict[str, Any]:
    """``decision`` (taken on the raw score), ``leak_prob`` and ``threshold`` as shown."""
    leak = raw_score >= raw_threshold
    prob, threshold = shown(leak_prob, prob_threshold, leak)
    return {"decision": DECISION_NAMES[int(leak)], "leak_prob": prob, "threshold": threshold}


def verdict(decision: str, domain: str) -> str:
    """The verdict of a row with the model's ``decision`` ("" when there is no call) and its
    domain check's answer."""
    if decision not in DECISION_NAMES:
        return UNUSABLE
    return UNCERTAIN if domain == SHIFTED else decision


def shifted_note(reason: str) -> str:
    """What a shifted recording's notes say: why, what ``leak_prob`` is then, what to do. A
    recording out of band (``band: ...``) is told to cross-validate at its loggers' own rate
    (``RATE_OPTION``): rebuilt at the model's rate, its network's recordings would leave the
    top bands empty again. The note depends on the reason alone, so every surface that shows
    a row (predict, serve, explain) gives the same words."""
    why = f" ({reason})" if reason else ""
    command = CV_COMMAND + (f" {RATE_OPTION}" if reason.startswith(f"{BAND}:") else "")
    return (f"UNCERTAIN: unlike the training recordings{why}; leak_prob is the model's answer "
            "under its training distribution, not a calibrated probability here; before acting "
            f"on calls here, cross-validate on labelled recordings of this network: "
            f"`{command}`")


def with_verdict(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with its ``verdict``, and for a shifted recording ``shifted_note`` added to its
    ``notes``."""
    out = {**row, "verdict": verdict(str(row.get("decision") or ""),
                                     str(row.get("domain") or ""))}
    if out["verdict"] == UNCERTAIN:
        note = shifted_note(str(row.get("domain_reason") or ""))
        out["notes"] = "; ".join(filter(None, [str(row.get("notes") or ""), note]))
    return out


SET_NOTE_START = "UNCERTAIN as a set:"


def set_note(p_value: float) -> str:
    """What each called row of a set the set domain check calls shifted says (always last in
    its notes, so a resumed run can take it off again)."""
    return (f"{SET_NOTE_START} these recordings, taken together, are farther from the training "
            f"recordings than its val recordings were (set domain check, rank test p = "
            f"{p_value:.2g}), though this one alone may pass; on such a set the calls at the "
            "operating point are not to be trusted, its leak_prob still ranks the recordings; "
            f"before acting, cross-validate on labelled recordings of this network: {CV_COMMAND}")


def with_set_verdict(row: Mapping[str, Any], set_domain: str,
                     p_value: float = math.nan) -> dict[str, Any]:
    """``row`` (a whole row with its own ``verdict``) under its set's domain answer: a row with
    a call becomes ``UNCERTAIN`` with ``set_note`` when ``set_domain`` is ``shifted`` (one
    that its own check called shifted keeps its own note too); a note of
    an earlier set answer is taken off first, so a row kept by ``--resume`` follows the set it
    now belongs to."""
    notes = str(row.get("notes") or "")
    start = notes.find(SET_NOTE_START)
    if start >= 0:
        notes = notes[:start].rstrip("; ")
    decision = str(row.get("decision") or "")
    own = verdict(decision, str(row.get("domain") or "")) if decision else row.get("verdict")
    out = {**row, "notes": notes, "verdict": own}
    if set_domain == SHIFTED and own in (*DECISION_NAMES, UNCERTAIN):
        out["verdict"] = UNCERTAIN
        out["notes"] = "; ".join(filter(None, [notes, set_note(p_value)]))
    return out


def verdict_counts(rows: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """How many rows have each verdict, and (key ``UNCERTAIN LEAK``) how many UNCERTAIN ones
    the model called LEAK."""
    counts: Counter[str] = Counter()
    for row in rows:
        counts[str(row.get("verdict"))] += 1
        if row.get("verdict") == UNCERTAIN and row.get("decision") == LEAK:
            counts[f"{UNCERTAIN} {LEAK}"] += 1
    return counts


def counts_text(counts: Mapping[str, int]) -> str:
    """``3 LEAK, 5 NOLEAK, 2 UNCERTAIN (out of domain; 1 called LEAK by the model)``."""
    uncertain = counts.get(UNCERTAIN, 0)
    text = f"{counts.get(LEAK, 0)} LEAK, {counts.get(NOLEAK, 0)} NOLEAK, {uncertain} UNCERTAIN"
    if uncertain:
        called = counts.get(f"{UNCERTAIN} {LEAK}", 0)
        text += f" (out of domain; {called} called LEAK by the model)"
    return text


def finite_or_blank(value: float) -> float | str:
    """A rounded figure, or "" for NaN / inf (a blank CSV cell, JSON null once served)."""
    return round(float(value), DECIMALS) if math.isfinite(value) else ""


__all__ = ["CV_COMMAND", "DECIMALS", "LEAK", "NOLEAK", "UNCERTAIN", "UNUSABLE", "VERDICTS",
           "SET_NOTE_START", "call_fields", "counts_text", "finite_or_blank", "set_note",
           "shifted_note", "shown", "verdict", "verdict_counts", "with_set_verdict",
           "with_verdict"]
