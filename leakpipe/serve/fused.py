"""A served `fused` detector: one verdict per recording from its CNN clips and its statistics.

Each waveform goes through the fused detector's own scoring path, as `leakpipe predict` scores
a file of this kind (``predict.fused.measure_fused``): decoded once, every block to build's
signal checks and to the statistics part's accumulator (at the recording's own rate), the clips
cut from the same blocks scored by the CNN part with its own scoring rules (``serve.cnn.
served_rules``), the two parts' recording logits stacked. The answer has the same columns as
the other kinds' (``leakpipe.serve``):

- ``verdict``, ``leak_prob`` the calibrated stacked probability, ``threshold`` the operating
  point on that scale, ``decision`` (the model's call), ``rule`` ``fused``, ``duration_s``,
  ``band_hz`` (the recording's own Nyquist frequency);
- ``band_limited``: a part reads something the recording's rate cannot fill (a statistic the
  statistics part reads is missing, or the Nyquist frequency lies below the CNN's ``fmax``);
- the domain check of **both** parts, as predict's CSV has it (``predict.fused.fused_domain``):
  the statistics part's (``decision.stats_domain``) and the CNN part's (its band profile
  against evaluate's reference, ``decision.domain``; a part without a reference says nothing).
  ``domain`` is ``shifted`` when either part's check is, ``domain_reason`` names the part
  (``logger_stats statistic: ...``, ``cnn band: ...``), ``domain_distance`` is the larger of
  the two distances, each over its own limit (the statistics' 1, the CNN's val threshold):
  above 1 a part is past its limit; ``verdict`` is then UNCERTAIN;
- empty, as for `logger_stats` (one verdict per recording, no segment timeline): ``prob_mode``
  "", ``vote_fraction``, ``frac_long_over`` and ``n_long`` null, the timeline lists [];
- predict's recording-level columns, from the same code (``predict.fused.fused_fields``):
  ``raw_score`` (the stacked probability the call is taken on), ``kind``, ``sample_rate``,
  ``top_statistic`` (the statistic that moved the statistics part most) and ``notes`` (the
  checks that only flag the recording): each the value predict's CSV has for the recording
  (``leakpipe explain`` gives each part's evidence).

A dead channel is always refused (``predict.inputs.signal_notes``), as for every kind: a silent
logger is ``unusable``, never NOLEAK.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.audio.clips import AudioError
from leakpipe.audio.opening import AudioSource
from leakpipe.decision.verdict import with_verdict
from leakpipe.predict.fused import combined_domain, fused_fields  # combined_domain: callers'
from leakpipe.predict.rows import STATUS_ERROR, Failed
from leakpipe.predict.scoring import ClipScoring, clip_scoring
from leakpipe.predict.stats import blank_row
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
    """One recording's row: predict's (``predict.fused.fused_fields``, the same code), with the
    served columns predict's CSV of this kind has not (see the module docstring)."""
    row: dict[str, Any] = {**blank_row(Path(str(source.path)), detector),
                           "rule": detector.kind, "prob_mode": ""}
    if isinstance(source, Failed):
        return with_verdict({**row, "status": source.status, "notes": source.reason})
    row["band_hz"] = source.sample_rate / 2
    try:
        fields, measured = fused_fields(source, detector, scoring)
    except AudioError as exc:
        return with_verdict({**row, "status": STATUS_ERROR, "notes": str(exc)})
    if measured is not None:
        used = np.asarray(measured.stats, np.float64)[detector.logger_stats.columns]  # (S,)
        row["band_limited"] = bool(not np.isfinite(used).all()
                                   or measured.rate / 2 < detector.cnn.features.fmax)
    return with_verdict({**row, **fields})


__all__ = ["FusedScorer", "combined_domain", "fused_row"]
