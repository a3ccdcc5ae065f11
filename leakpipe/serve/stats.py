"""A served `logger_stats` detector: one verdict per recording from its level statistics.

Each waveform is measured as `leakpipe predict` measures a file of this kind (``stats_detector.
measure``: the statistics at its own rate, build's signal checks), and the answer has the same
columns as a `cnn` detector's (``leakpipe.serve``): ``verdict``, ``leak_prob`` the calibrated
probability, ``threshold`` the operating point on that scale (both as predict's CSV shows them),
``decision`` (the model's call), ``rule`` ``logger_stats``, ``duration_s``, ``band_hz`` (the
recording's own Nyquist frequency) and ``band_limited`` (a statistic the detector reads is
missing at that rate), the domain check of its statistics (``decision.stats_domain``,
predict's ``stats_domain_fields``). What this kind does not have is empty: ``prob_mode`` "",
``vote_fraction``, ``frac_long_over`` and ``n_long`` null, the timeline lists []. ``notes``
carries the checks that only flag the recording and the statistic that moved the score most.

A dead channel is always refused, whatever ``build.quality.reject`` the detector holds (as the
`cnn` kind refuses it): a silent logger is ``unusable``, never NOLEAK.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from leakpipe.audio.clips import AudioError
from leakpipe.audio.opening import AudioSource
from leakpipe.audio.quality import DEAD
from leakpipe.decision.verdict import DECIMALS, call_fields, with_verdict
from leakpipe.predict.rows import STATUS_ERROR, STATUS_OK, STATUS_UNUSABLE, Failed
from leakpipe.predict.stats import stats_domain_fields
from leakpipe.stats_detector import StatsDetector, measure

EXAMPLE_SECONDS = 2.0      # length of the logged input example's recordings


def with_dead_refused(detector: StatsDetector) -> StatsDetector:
    """``detector`` with ``dead`` among the refused checks (it is the one check that never
    only flags)."""
    quality = detector.quality
    if DEAD in quality.reject:
        return detector
    return dataclasses.replace(detector, quality=dataclasses.replace(
        quality, reject=(*quality.reject, DEAD)))


class StatsScorer:
    """Rows of in-memory recordings for a `logger_stats` detector."""

    def __init__(self, detector: StatsDetector) -> None:
        self.detector = with_dead_refused(detector)

    @staticmethod
    def example_seconds(detector: StatsDetector) -> float:
        return EXAMPLE_SECONDS

    def rows(self, sources: list[AudioSource | Failed]) -> list[dict[str, Any]]:
        return [stats_row(s, self.detector) for s in sources]


def stats_row(source: AudioSource | Failed, detector: StatsDetector) -> dict[str, Any]:
    """One recording's row (``leakpipe.serve``'s columns; see the module docstring)."""
    row: dict[str, Any] = {"status": STATUS_OK, "rule": detector.kind, "prob_mode": "",
                           "threshold": round(detector.prob_threshold, DECIMALS),
                           "decision": "", "domain": "", "domain_reason": "", "notes": ""}
    if isinstance(source, Failed):
        return with_verdict({**row, "status": source.status, "notes": source.reason})
    try:
        measured = measure(source, detector)
    except AudioError as exc:
        return with_verdict({**row, "status": STATUS_ERROR, "notes": str(exc)})
    row.update(duration_s=round(measured.seconds, DECIMALS), band_hz=measured.rate / 2)
    if measured.stats is None:
        return with_verdict({
            **row, "status": STATUS_UNUSABLE,
            "notes": f"{source.path}: {'; '.join(measured.problems)}: no leak decision on this "
                     "signal (build.quality.reject; a dead channel always)"})
    used = np.asarray(measured.stats, dtype=np.float64)[detector.columns]       # (S,)
    score = float(detector.probability(measured.stats[None, :])[0])
    moved = detector.contributions(measured.stats)
    top = max(moved, key=lambda k: abs(moved[k]))
    notes = [*(f"flagged: {flag}" for flag in measured.flags), f"top statistic {top} "
             f"{moved[top]:+.2f}"]
    return with_verdict({
        **row, **call_fields(score, detector.threshold, detector.leak_prob(score),
                             detector.prob_threshold),
        "band_limited": bool(not np.isfinite(used).all()),
        **stats_domain_fields(detector, measured.stats), "notes": "; ".join(notes)})


__all__ = ["EXAMPLE_SECONDS", "StatsScorer", "stats_row", "with_dead_refused"]
