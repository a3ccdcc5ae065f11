"""The record step of a round: its entry, its MLflow figures, the round state, the log line.

- ``round_entry`` (pure): the round's entry in state.json and metrics/adapt.json: status,
  threshold, val and check-set figures, and for a round whose detector stands its pool
  pseudo-labels (counts, the label per recording, how many changed since the standing round,
  their accuracy where the pool's truth is given) and the next round's split.
- ``stop_reason`` (pure): why adaptation ends after this round ("" to go on): a rejected
  round's reason, or nothing left to learn from (no pool recording outside the margin).
- ``round_line`` (pure): the round's one log line.
- ``record_round``: the round's run named after its fate with its figures (also on the
  parent run, step = round), then the entry added to the round state, then the stop. The
  entry is written last but the stop: a run killed before it repeats the round.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from leakpipe import tracking
from leakpipe.adapt.pseudo import PoolLabels, changed_labels, label_accuracy
from leakpipe.adapt.report import round_metrics, round_run_name
from leakpipe.adapt.state import AdaptState

log = logging.getLogger(__name__)

STAGE = "adapt"
SEED, ACCEPTED, REJECTED = "seed", "accepted", "rejected"
STATUS_TAG = "leakpipe.adapt_status"


def round_entry(r: int, status: str, threshold: float, val: Mapping[str, float],
                check: Mapping[str, float] | None, *, reason: str = "",
                labels: PoolLabels | None = None,
                previous: Mapping[str, int | None] | None = None,
                truth: Mapping[str, int] | None = None,
                split: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Round ``r``'s entry; ``labels`` are its pool pseudo-labels (None for a rejected round),
    ``previous`` the standing round's (None for the seed round), ``split`` the summary of what
    the next round trains on (None when there is no next round to train)."""
    entry: dict[str, Any] = {"round": r, "status": status, "threshold": threshold,
                             "val": val, "reason": reason}
    if check is not None:
        entry["check"] = check
    if labels is None:
        return entry
    entry["pseudo"] = labels.counts
    entry["labels"] = labels.labels
    if previous is not None:
        entry["changed"] = changed_labels(previous, labels.labels)
    if truth is not None:
        entry["pool"] = {"label_accuracy": label_accuracy(labels.labels, truth)}
    if split is not None:
        entry["split"] = dict(split)
    return entry


def stop_reason(entry: Mapping[str, Any], *, rounds: int, margin: float) -> str:
    """Why adaptation ends after round ``entry`` of ``rounds`` ("" to go on)."""
    if entry["status"] == REJECTED:
        return str(entry["reason"])
    r = entry["round"]
    if r < rounds and not entry["pseudo"]["segments"]:
        return (f"after round {r}: no pool recording is outside the margin {margin:g} of the "
                f"threshold; nothing to learn from")
    return ""


def fmt_figure(value: float | None) -> str:
    """A figure in a log line: three decimals, ``n/a`` when missing."""
    return "n/a" if value is None else f"{value:.3f}"


def round_line(entry: Mapping[str, Any]) -> str:
    """``adapt round 1 (accepted): val F1 ... | field check FPR ... | pseudo-labels ...``."""
    check = entry.get("check") or {}
    p = entry["pseudo"]
    changed = entry.get("changed")
    return (f"adapt round {entry['round']:d} ({entry['status']}): val F1 "
            f"{entry['val']['f1']:.3f} @ {entry['threshold']:.2f} | field check FPR "
            f"{fmt_figure(check.get('fpr'))} sensitivity {fmt_figure(check.get('recall'))} | "
            f"pseudo-labels {p['leak']:d} LEAK, {p['not_leak']:d} not, "
            f"{p['within_margin']:d} within margin"
            + (f", {changed} changed" if changed is not None else ""))


def record_round(state: AdaptState, entry: dict[str, Any], child: tracking.Tracker,
                 parent: tracking.Tracker, *, rounds: int, margin: float) -> AdaptState:
    """Round ``entry`` in its run, its parent's histories, the log and the round state; the
    state it leaves (stopped when ``stop_reason`` says so)."""
    r, status = entry["round"], entry["status"]
    if status == REJECTED:
        log.warning("adapt: %s", entry["reason"])
    child.set_tags({STATUS_TAG: status, tracking.RUN_NAME_TAG: round_run_name(STAGE, r, status)})
    child.log_metrics(round_metrics(entry))
    parent.log_metrics(round_metrics(entry), step=r)
    if status != REJECTED:
        log.info("%s", round_line(entry))
    return state.added(entry, stop_reason(entry, rounds=rounds, margin=margin))
