"""`leakpipe predict` with a `fused` detector: one verdict per recording from its CNN clips and
its level statistics, both from one decoding.

Each recording is decoded once, block by block (predict's ``prepare``): every block goes to
build's signal checks and to the statistics part's accumulator (at the recording's own rate, as
build measured the training ones), and the clips cut from the same blocks (resampled to the
CNN's rate, evenly spaced from start to end as predict places them) become the CNN's features,
scored a batch's worth at a time through predict's scoring path (``ClipScoring``, which
``leakpipe.predict.scoring.clip_scoring`` makes). The CNN part's recording probability is the
mean of its clips' rule scores, the statistics part's the net's probability; the stacker weighs
the two (``stats_detector.FusedDetector``). The served detector (``leakpipe.serve.fused``)
measures an in-memory waveform through the same ``measure_fused``.

A recording whose signal fails a refused check (a dead channel always, and every check of
``quality.reject``) is ``unusable``, never ``NOLEAK``; one that cannot be read or is shorter
than the CNN's shortest usable recording gets an ``error`` row. The rows have the logger_stats
kind's columns (``predict.stats.COLUMNS``) and go through its loop (``--resume``, the detector
recorded beside the CSV): ``raw_score`` is the stacked probability (the call is taken on it),
``leak_prob`` its calibration and ``threshold`` the operating point on that scale,
``top_statistic`` the statistic that moved the statistics part most (``leakpipe explain`` gives
both parts' evidence and every statistic). The domain check is both parts' (``fused_domain``):
``shifted`` when the statistics part's check (``decision.stats_domain``) or the CNN part's (its
clips' band profile against evaluate's reference, ``decision.domain``; a part without a
reference says nothing) is, ``domain_reason`` naming the part (``logger_stats band: ...``,
``cnn shape: ...``), ``domain_distance`` the larger of the two distances each over its own limit
(the statistics' 1, the CNN's val threshold): above 1 a part is past its limit. A shifted
recording's verdict is UNCERTAIN (``decision.verdict``). The set domain check reads the CNN
part's distance of each recording (``cnn_distance``, against that part's val recordings: a
shifted set makes every call UNCERTAIN, ``predict.rows.check_recording_set``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.audio.clips import AudioError
from leakpipe.audio.opening import AudioSource, open_audio, unread_format
from leakpipe.decision.domain import (
    IN,
    SHIFTED,
    UNKNOWN,
    DomainCheck,
    assess,
    band_profile,
)
from leakpipe.decision.verdict import DECIMALS, call_fields, with_verdict
from leakpipe.features.mel import band_centers_hz
from leakpipe.features.recording_stats import StatsAccumulator
from leakpipe.files import os_problem
from leakpipe.predict.inputs import Unusable, prepare
from leakpipe.predict.rows import SET_DISTANCE, STATUS_ERROR, STATUS_UNUSABLE
from leakpipe.predict.scoring import ClipScoring
from leakpipe.predict.stats import RAW_DECIMALS, blank_row, run_predict_stats, top_statistic
from leakpipe.predict.target import DetectorStamp
from leakpipe.stats_detector import FusedDetector


@dataclass(frozen=True)
class FusedMeasured:
    """One recording as a fused detector sees it."""

    cnn_prob: float          # the mean of its clips' rule scores
    stats: np.ndarray        # (S_all,) its level statistics, NaN above its Nyquist frequency
    rate: int
    seconds: float
    notes: str               # flagged (not refused) checks; a zero-padded short recording
    profile: np.ndarray      # (M,) band profile of its clips (the CNN part's domain check)
    # the CNN part's long segments in time order (explain's timeline): start s, probability
    long_starts_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    long_probs: np.ndarray = field(default_factory=lambda: np.zeros(0))


def measure_fused(recording: Path | AudioSource, detector: FusedDetector,
                  scoring: ClipScoring) -> FusedMeasured:
    """Decode ``recording`` (a file, or samples in memory: a served request) once: the CNN
    part's probability and the statistics. Raises ``Unusable`` (a refused signal),
    ``AudioError`` (unreadable, too short) or ``OSError``."""
    source = recording if isinstance(recording, AudioSource) else open_audio(recording)
    levels = StatsAccumulator(detector.logger_stats.stats, source.sample_rate)
    probs: list[np.ndarray] = []                       # (clips, L, S) per part
    profiles: list[np.ndarray] = []                    # (M,) per part, times its clips
    starts: list[np.ndarray] = []                      # (clips,) per part, seconds
    notes = ""
    for part in prepare(source, detector.cnn, scoring.min_fraction, scoring.max_clips,
                        detector.quality, on_block=levels.add):
        probs.append(scoring.score(part.mel))
        profiles.append(band_profile(part.mel) * len(part.mel))
        starts.append(part.starts_s)
        notes = part.notes
    seg_probs = np.concatenate(probs)                                      # (clips, L, S)
    f = detector.cnn.features
    offsets = np.arange(seg_probs.shape[1]) * f.long_hop / f.sample_rate   # (L,)
    long_starts = (np.concatenate(starts)[:, None] + offsets[None, :]).reshape(-1)
    long_probs = seg_probs.astype(np.float64).mean(axis=2).reshape(-1)     # (clips * L,)
    order = np.argsort(long_starts, kind="stable")
    return FusedMeasured(detector.cnn_probability(seg_probs), levels.values(),
                         int(source.sample_rate), source.frames / source.sample_rate, notes,
                         np.sum(profiles, axis=0) / len(seg_probs), long_starts[order],
                         long_probs[order])


def score_fused_file(path: Path, detector: FusedDetector, scoring: ClipScoring) -> dict[str, Any]:
    """One recording's row (``predict.stats.COLUMNS``)."""
    row = blank_row(path, detector)
    if reason := unread_format(path):
        return with_verdict({**row, "status": STATUS_UNUSABLE, "notes": reason})
    try:
        fields, _ = fused_fields(path, detector, scoring)
    except AudioError as exc:
        return with_verdict({**row, "status": STATUS_ERROR, "notes": str(exc)})
    except OSError as exc:
        return with_verdict({**row, "status": STATUS_ERROR,
                             "notes": f"{path}: {os_problem(path, exc)}"})
    return with_verdict({**row, **fields})


def fused_fields(recording: Path | AudioSource, detector: FusedDetector, scoring: ClipScoring
                 ) -> tuple[dict[str, Any], FusedMeasured | None]:
    """A recording's row fields under a fused detector (a file's, or a served request's: one
    code for both), and the measurement (None: a refused signal, an ``unusable`` row); raises
    ``AudioError`` (unreadable, too short) or ``OSError``."""
    source = recording if isinstance(recording, AudioSource) else open_audio(recording)
    heard = {"sample_rate": int(source.sample_rate),
             "duration_s": round(source.frames / source.sample_rate, 3)}
    try:
        measured = measure_fused(source, detector, scoring)
    except Unusable as exc:
        return {**heard, "status": STATUS_UNUSABLE, "notes": str(exc)}, None
    score = float(detector.probability(measured.cnn_prob, measured.stats[None, :])[0])
    return {**heard, "raw_score": round(score, RAW_DECIMALS),
            **call_fields(score, detector.threshold, detector.leak_prob(score),
                          detector.prob_threshold),
            "top_statistic": top_statistic(detector.logger_stats.contributions(measured.stats)),
            **fused_domain(detector, measured), "notes": measured.notes,
            SET_DISTANCE: cnn_distance(detector, measured)}, measured


def cnn_distance(detector: FusedDetector, measured: FusedMeasured) -> float:
    """The CNN part's distance D of the recording's band profile (what the set domain check
    compares with that part's val recordings' D; NaN without a reference)."""
    return _cnn_check(detector, measured).distance


def _cnn_check(detector: FusedDetector, measured: FusedMeasured) -> DomainCheck:
    f = detector.cnn.features
    return assess(detector.cnn.domain, measured.profile,
                  band_centers_hz(f.n_mels, f.fmin, f.fmax), measured.rate / 2)


def fused_domain(detector: FusedDetector, measured: FusedMeasured) -> dict[str, Any]:
    """``domain``, ``domain_distance`` and ``domain_reason`` of both parts' checks."""
    checks = {"cnn": _cnn_check(detector, measured),
              detector.logger_stats.kind: detector.logger_stats.domain(measured.stats)}
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


def run_predict_fused(paths: Sequence[Path], detector: FusedDetector, out: Path, *,
                      scoring: ClipScoring, stamp: DetectorStamp, resume: bool,
                      progress: bool) -> dict[str, int]:
    """Score every recording under ``paths`` into the CSV ``out``; the counts."""
    return run_predict_stats(paths, detector, out, stamp=stamp, resume=resume,
                             progress=progress,
                             score=functools.partial(score_fused_file, detector=detector,
                                                     scoring=scoring))


__all__ = ["ClipScoring", "FusedMeasured", "cnn_distance", "combined_domain", "fused_domain",
           "fused_fields", "measure_fused",
           "run_predict_fused", "score_fused_file"]
