"""`leakpipe predict` with a `fused` detector: one verdict per recording from its CNN clips and
its level statistics, both from one decoding.

Each recording is decoded once, block by block (predict's ``prepare``): every block goes to
build's signal checks and to the statistics part's accumulator (at the recording's own rate, as
build measured the training ones), and the clips cut from the same blocks (resampled to the
CNN's rate, evenly spaced from start to end as predict places them) become the CNN's features,
scored a batch's worth at a time through predict's scoring path (``ClipScoring``, which
``leakpipe.predict`` makes). The CNN part's recording probability is the mean of its clips'
rule scores, the statistics part's the net's probability; the stacker weighs the two
(``stats_detector.FusedDetector``). The served detector (``leakpipe.serve.fused``) measures an
in-memory waveform through the same ``measure_fused``.

A recording whose signal fails a refused check (a dead channel always, and every check of
``quality.reject``) is ``unusable``, never ``NOLEAK``; one that cannot be read or is shorter
than the CNN's shortest usable recording gets an ``error`` row. The rows have the logger_stats
kind's columns (``predict_stats.COLUMNS``) and go through its loop (``--resume``, the detector
recorded beside the CSV): ``score`` is the stacked probability, ``leak_prob`` its calibration
and ``threshold`` the operating point on that scale, ``top_statistic`` the statistic that moved
the statistics part most (``leakpipe explain`` gives both parts' evidence and every statistic).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.audio.clips import AudioError
from leakpipe.audio.io import AudioSource, open_audio
from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.domain import band_profile
from leakpipe.features.recording_stats import StatsAccumulator
from leakpipe.files import os_problem
from leakpipe.predict_inputs import Unusable, prepare, unread_format
from leakpipe.predict_rows import DECIMALS, STATUS_ERROR, STATUS_UNUSABLE
from leakpipe.predict_stats import blank_row, run_predict_stats, top_statistic
from leakpipe.predict_target import DetectorStamp
from leakpipe.stats_detector import FusedDetector


@dataclass(frozen=True)
class ClipScoring:
    """How predict scores a CNN detector's clips."""

    score: Callable[[np.ndarray], np.ndarray]   # (clips, L, S, M, T) -> (clips, L, S) probs
    max_clips: int                              # clips per call: about one batch
    min_fraction: float                         # shortest usable recording, share of a clip


@dataclass(frozen=True)
class FusedMeasured:
    """One recording as a fused detector sees it."""

    cnn_prob: float          # the mean of its clips' rule scores
    stats: np.ndarray        # (S_all,) its level statistics, NaN above its Nyquist frequency
    rate: int
    seconds: float
    notes: str               # flagged (not refused) checks; a zero-padded short recording
    profile: np.ndarray      # (M,) band profile of its clips (the CNN part's domain check)


def measure_fused(recording: Path | AudioSource, detector: FusedDetector,
                  scoring: ClipScoring) -> FusedMeasured:
    """Decode ``recording`` (a file, or samples in memory: a served request) once: the CNN
    part's probability and the statistics. Raises ``Unusable`` (a refused signal),
    ``AudioError`` (unreadable, too short) or ``OSError``."""
    source = recording if isinstance(recording, AudioSource) else open_audio(recording)
    levels = StatsAccumulator(detector.logger_stats.stats, source.sample_rate)
    probs: list[np.ndarray] = []                       # (clips, L, S) per part
    profiles: list[np.ndarray] = []                    # (M,) per part, times its clips
    notes = ""
    for part in prepare(source, detector.cnn, scoring.min_fraction, scoring.max_clips,
                        detector.quality, on_block=levels.add):
        probs.append(scoring.score(part.mel))
        profiles.append(band_profile(part.mel) * len(part.mel))
        notes = part.notes
    seg_probs = np.concatenate(probs)                                      # (clips, L, S)
    return FusedMeasured(detector.cnn_probability(seg_probs), levels.values(),
                         int(source.sample_rate), source.frames / source.sample_rate, notes,
                         np.sum(profiles, axis=0) / len(seg_probs))


def score_fused_file(path: Path, detector: FusedDetector, scoring: ClipScoring) -> dict[str, Any]:
    """One recording's row (``predict_stats.COLUMNS``)."""
    row = blank_row(path, detector)
    if reason := unread_format(path):
        return {**row, "status": STATUS_UNUSABLE, "notes": reason}
    try:
        measured = measure_fused(path, detector, scoring)
    except Unusable as exc:
        return {**row, "status": STATUS_UNUSABLE, "notes": str(exc)}
    except AudioError as exc:
        return {**row, "status": STATUS_ERROR, "notes": str(exc)}
    except OSError as exc:
        return {**row, "status": STATUS_ERROR, "notes": f"{path}: {os_problem(path, exc)}"}
    score = float(detector.probability(measured.cnn_prob, measured.stats[None, :])[0])
    return {**row, "sample_rate": measured.rate, "duration_s": round(measured.seconds, 3),
            "score": round(score, 6), "leak_prob": round(detector.leak_prob(score), DECIMALS),
            "decision": DECISION_NAMES[int(score >= detector.threshold)],
            "top_statistic": top_statistic(detector.logger_stats.contributions(measured.stats)),
            "notes": measured.notes}


def run_predict_fused(paths: Sequence[Path], detector: FusedDetector, out: Path, *,
                      scoring: ClipScoring, stamp: DetectorStamp, resume: bool,
                      progress: bool) -> dict[str, int]:
    """Score every recording under ``paths`` into the CSV ``out``; the counts."""
    return run_predict_stats(paths, detector, out, stamp=stamp, resume=resume,
                             progress=progress,
                             score=functools.partial(score_fused_file, detector=detector,
                                                     scoring=scoring))


__all__ = ["ClipScoring", "FusedMeasured", "measure_fused", "run_predict_fused",
           "score_fused_file"]
