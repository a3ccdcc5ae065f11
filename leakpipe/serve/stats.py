"""A served `logger_stats` detector: one verdict per recording from its level statistics.

Each waveform is measured and its row made by the code that makes `leakpipe predict`'s row of
a file of this kind (``predict.stats.measured_fields``: the statistics at its own rate, build's
signal checks), so every column of predict's CSV of this kind has the same value here
(``verdict``, ``leak_prob``, ``decision``, ``threshold``, ``raw_score``, ``kind``,
``sample_rate``, ``duration_s``, ``top_statistic``, the domain check of its statistics,
``notes``). The served answer has the columns of every kind (``leakpipe.serve``); those of
this kind beyond predict's CSV: ``rule`` ``logger_stats``, ``band_hz`` (the recording's own
Nyquist frequency), ``band_limited`` (a statistic the detector reads is missing at that rate);
what it does not have is empty: ``prob_mode`` "", ``vote_fraction``, ``frac_long_over`` and
``n_long`` null, the timeline lists [].

A dead channel is always refused, whatever ``build.quality.reject`` the detector holds (as the
`cnn` kind refuses it): a silent logger is ``unusable``, never NOLEAK.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.audio.clips import AudioError
from leakpipe.audio.opening import AudioSource
from leakpipe.audio.quality import DEAD
from leakpipe.decision.verdict import with_verdict
from leakpipe.predict.rows import STATUS_ERROR, Failed
from leakpipe.predict.stats import blank_row, measured_fields
from leakpipe.stats_detector import StatsDetector

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
    """One recording's row: predict's (``predict.stats.measured_fields``, the same code), with
    the served columns predict's CSV of this kind has not (see the module docstring)."""
    row: dict[str, Any] = {**blank_row(Path(str(source.path)), detector),
                           "rule": detector.kind, "prob_mode": ""}
    if isinstance(source, Failed):
        return with_verdict({**row, "status": source.status, "notes": source.reason})
    try:
        fields, measured = measured_fields(source, detector)
    except AudioError as exc:
        return with_verdict({**row, "status": STATUS_ERROR, "notes": str(exc)})
    row["band_hz"] = measured.rate / 2
    if measured.stats is not None:
        used = np.asarray(measured.stats, dtype=np.float64)[detector.columns]       # (S,)
        row["band_limited"] = bool(not np.isfinite(used).all())
    return with_verdict({**row, **fields})


__all__ = ["EXAMPLE_SECONDS", "StatsScorer", "stats_row", "with_dead_refused"]
