"""The rows of `leakpipe predict` (its CSV) and of the served detector: one per recording.

A scored recording's row holds the leak probability (the rule's score through the detector's
calibration, ``leakpipe.decision.calibration``), the decision (taken on the score itself), the
operating point on the same probability scale (``threshold``), the share of long segments at or
above it, the long-segment timeline (the network's probabilities, uncalibrated: the calibration
maps a recording's rule score, not single segments) and how much of the model's band
the recording covers: ``band_hz`` is its own Nyquist frequency (sample_rate / 2) and
``band_limited`` is true when that lies below the model's ``fmax``, i.e. when the mel bands
above ``band_hz`` see only the resampler's empty band rather than the pipe (a 4096 Hz logger
under the default 8192 Hz model: the 18 of 64 bands centred above 2048 Hz). A recording that
cannot be used gets an error row: its reason in ``notes``, no figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.voting import file_scores, long_segment_probs
from leakpipe.detector import Detector

__all__ = ["COLUMNS", "DECIMALS", "STATUS_ERROR", "STATUS_OK", "Failed", "Prepared", "error_row",
           "result_row"]

COLUMNS = ("path", "status", "leak_prob", "decision", "threshold", "rule", "prob_mode",
           "vote_fraction", "frac_long_over", "n_long", "duration_s", "band_hz", "band_limited",
           "long_starts_s", "long_probs", "notes")
STATUS_OK, STATUS_ERROR = "ok", "error"
DECIMALS = 4               # probabilities and times in the CSV


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
    path: Path
    reason: str


def _fmt(values: np.ndarray) -> str:
    return " ".join(f"{v:.{DECIMALS}f}" for v in values)


def result_row(prep: Prepared, starts_s: np.ndarray, seg_probs: np.ndarray,
               detector: Detector) -> dict[str, Any]:
    """The row of ``prep``'s recording from the (clips,) starts and (clips, L, S) probabilities
    of all its clips: every long segment of every clip votes together."""
    voting, f = detector.voting, detector.features
    probs = seg_probs.reshape(1, -1, seg_probs.shape[-1])            # (1, clips * L, S)
    score = float(file_scores(probs, voting.rule, voting.vote_fraction)[0])
    long_probs = long_segment_probs(probs)[0]                        # (clips * L,)
    offsets = np.arange(seg_probs.shape[1]) * f.long_hop / f.sample_rate   # (L,)
    starts = (starts_s[:, None] + offsets[None, :]).reshape(-1)      # (clips * L,)
    return {**_rule_fields(detector), "path": str(prep.path), "status": STATUS_OK,
            "leak_prob": round(detector.leak_prob(score), DECIMALS),   # calibrated on val
            "decision": DECISION_NAMES[int(score >= detector.threshold)],
            "frac_long_over": round(float((long_probs >= detector.threshold).mean()), DECIMALS),
            "n_long": len(long_probs), "duration_s": round(prep.duration_s, DECIMALS),
            "band_hz": float(prep.band_hz), "band_limited": bool(prep.band_hz < f.fmax),
            "long_starts_s": _fmt(starts), "long_probs": _fmt(long_probs), "notes": prep.notes}


def error_row(failed: Failed, detector: Detector) -> dict[str, Any]:
    empty = {name: "" for name in COLUMNS}
    return {**empty, **_rule_fields(detector), "path": str(failed.path),
            "status": STATUS_ERROR, "notes": failed.reason}


def _rule_fields(detector: Detector) -> dict[str, Any]:
    voting = detector.voting
    return {"threshold": detector.prob_threshold, "rule": voting.rule,
            "prob_mode": voting.prob_mode, "vote_fraction": voting.vote_fraction}
