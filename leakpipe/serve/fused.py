"""A served `fused` detector: one verdict per recording from its CNN clips and its statistics.

Each waveform goes through the fused detector's own scoring path, as `leakpipe predict` scores
a file of this kind (``predict_fused.measure_fused``): decoded once, every block to build's
signal checks and to the statistics part's accumulator (at the recording's own rate), the clips
cut from the same blocks scored by the CNN part with its own scoring rules (``serve.cnn.
served_rules``), the two parts' recording logits stacked. The answer has the same columns as
the other kinds' (``leakpipe.serve``):

- ``leak_prob`` the calibrated stacked probability, ``threshold`` the operating point on that
  scale, ``decision``, ``rule`` ``fused``, ``duration_s``, ``band_hz`` (the recording's own
  Nyquist frequency);
- ``band_limited``: a part reads something the recording's rate cannot fill (a statistic the
  statistics part reads is missing, or the Nyquist frequency lies below the CNN's ``fmax``);
- the domain check of **both** parts: the statistics part's (``decision.stats_domain``) and the
  CNN part's (its band profile against evaluate's reference, ``decision.domain``; a part
  without a reference says nothing). ``domain`` is ``shifted`` when either part's check is,
  ``domain_reason`` names the part (``logger_stats statistic: ...``, ``cnn band: ...``),
  ``domain_distance`` is the larger of the two distances, each over its own limit (the
  statistics' 1, the CNN's val threshold): above 1 a part is past its limit;
- empty, as for `logger_stats` (one verdict per recording, no segment timeline): ``prob_mode``
  "", ``vote_fraction``, ``frac_long_over`` and ``n_long`` null, the timeline lists [];
- ``notes``: the checks that only flag the recording, each part's evidence (weight x logit:
  what it moved the stacked logit by) and the statistic that moved the statistics part most.

A dead channel is always refused (``predict_inputs.signal_notes``), as for every kind: a silent
logger is ``unusable``, never NOLEAK.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from leakpipe.audio.clips import AudioError
from leakpipe.audio.io import AudioSource
from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.domain import IN, SHIFTED, UNKNOWN, DomainCheck, assess
from leakpipe.decision.stats_domain import assess_stats
from leakpipe.features.mel import band_centers_hz
from leakpipe.predict import clip_scoring
from leakpipe.predict_fused import ClipScoring, FusedMeasured, measure_fused
from leakpipe.predict_inputs import Unusable
from leakpipe.predict_rows import DECIMALS, STATUS_ERROR, STATUS_OK, STATUS_UNUSABLE, Failed
from leakpipe.predict_stats import top_statistic
from leakpipe.runtime import make_runtime
from leakpipe.serve.cnn import served_rules
from leakpipe.serve.stats import EXAMPLE_SECONDS
from leakpipe.stats_detector import FusedDetector


class FusedScorer:
    """The CNN part on the serving device with its own scoring rules, once."""

    def __init__(self, detector: FusedDetector) -> None:
        self.detector = detector
        runtime = make_runtime("auto", "auto", device_key="serve device")
        # the signal checks are the fused detector's own (``measure_fused``), not the CNN's
        cnn = dataclasses.replace(detector.cnn, quality=detector.quality)
        self.scoring = clip_scoring(cnn, served_rules(cnn), runtime)

    @staticmethod
    def example_seconds(detector: FusedDetector) -> float:
        """How long the logged input example's recordings are: a clip, and long enough for
        the statistics."""
        return max(float(detector.cnn.features.clip_s), EXAMPLE_SECONDS)

    def rows(self, sources: list[AudioSource | Failed]) -> list[dict[str, Any]]:
        return [fused_row(s, self.detector, self.scoring) for s in sources]


def fused_row(source: AudioSource | Failed, detector: FusedDetector,
              scoring: ClipScoring) -> dict[str, Any]:
    """One recording's row (``leakpipe.serve``'s columns; see the module docstring)."""
    row: dict[str, Any] = {"status": STATUS_OK, "rule": detector.kind, "prob_mode": "",
                           "threshold": round(detector.prob_threshold, DECIMALS),
                           "decision": "", "domain": "", "domain_reason": "", "notes": ""}
    if isinstance(source, Failed):
        return {**row, "status": source.status, "notes": source.reason}
    row.update(duration_s=round(source.frames / source.sample_rate, DECIMALS),
               band_hz=source.sample_rate / 2)
    try:
        measured = measure_fused(source, detector, scoring)
    except Unusable as exc:
        return {**row, "status": STATUS_UNUSABLE, "notes": str(exc)}
    except AudioError as exc:
        return {**row, "status": STATUS_ERROR, "notes": str(exc)}
    score = float(detector.probability(measured.cnn_prob, measured.stats[None, :])[0])
    evidence = detector.evidence(measured.cnn_prob, measured.stats)
    used = np.asarray(measured.stats, np.float64)[detector.logger_stats.columns]     # (S,)
    notes = [measured.notes, "evidence " + ", ".join(f"{part} {value:+.2f}"
                                                     for part, value in evidence.items()),
             "top statistic " + top_statistic(detector.logger_stats.contributions(
                 measured.stats))]
    return {**row, **domain_fields(detector, measured),
            "leak_prob": round(detector.leak_prob(score), DECIMALS),
            "decision": DECISION_NAMES[int(score >= detector.threshold)],
            "band_limited": bool(not np.isfinite(used).all()
                                 or measured.rate / 2 < detector.cnn.features.fmax),
            "notes": "; ".join(filter(None, notes))}


def domain_fields(detector: FusedDetector, measured: FusedMeasured) -> dict[str, Any]:
    """``domain``, ``domain_distance`` and ``domain_reason`` of both parts' checks."""
    net, f = detector.logger_stats.net, detector.cnn.features
    used = np.asarray(measured.stats, np.float64)[detector.logger_stats.columns]
    checks = {"cnn": assess(detector.cnn.domain, measured.profile,
                            band_centers_hz(f.n_mels, f.fmin, f.fmax), measured.rate / 2),
              detector.logger_stats.kind: assess_stats(net.mean.numpy(), net.scale.numpy(),
                                                       net.names, used)}
    limits = {"cnn": detector.cnn.domain.threshold if detector.cnn.domain else math.nan,
              detector.logger_stats.kind: 1.0}
    return combined_domain(checks, limits)


def combined_domain(checks: dict[str, DomainCheck],
                    limits: dict[str, float]) -> dict[str, Any]:
    """Parts' checks -> one answer: ``shifted`` when a part's is, ``in`` when every part that
    knows says so, ``unknown`` when none knows; the distance is the largest of the parts'
    distances over their limits (None when none has one)."""
    known = {part: c for part, c in checks.items() if c.domain != UNKNOWN}
    shifted = [f"{part} {c.reason}" for part, c in known.items() if c.domain == SHIFTED]
    scaled = [c.distance / limits[part] for part, c in known.items()
              if math.isfinite(c.distance) and limits[part] > 0]
    domain = SHIFTED if shifted else IN if known else UNKNOWN
    return {"domain": domain, "domain_reason": "; ".join(shifted),
            "domain_distance": round(max(scaled), DECIMALS) if scaled else None}


__all__ = ["FusedScorer", "combined_domain", "domain_fields", "fused_row"]
