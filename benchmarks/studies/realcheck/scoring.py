"""Real recordings through the detector: every non-overlapping clip, scored as `predict` scores.

Recordings are found as `build` finds class folders (``<root>/LEAK/*.wav``,
``<root>/NOLEAK/*.wav``; one group per file). Each is read, resampled to the detector's rate
and cut into every non-overlapping clip (``build.clips_per_recording: all``; `leakpipe predict`
instead covers a recording with overlapping clips), and its features are computed with the
detector's feature config. Scoring goes through ``leakpipe.predict.scoring.score_segments`` (the
detector's ``input_norm`` included); a clip's score is the detector rule's score over its long
segments, so ``LEAK <=> score >= detector.threshold``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leakpipe.audio.io import load_clips
from leakpipe.constants import LEAK_CLASS
from leakpipe.data.manifest import discover
from leakpipe.decision.voting import file_scores
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.features.mel import clip_features
from leakpipe.predict.rules import ScoringRules
from leakpipe.predict.scoring import score_segments
from leakpipe.runtime import Runtime
from realcheck.metrics import ClipTable

GROUP_BY = "file"      # every real recording is its own group


@dataclass(frozen=True)
class Scoring:
    """Where the check runs the networks and by which rules (`leakpipe predict`'s)."""

    runtime: Runtime
    rules: ScoringRules


@dataclass(frozen=True)
class RealRecording:
    """One real recording and its clips' features (detector feature config)."""

    recording_id: str
    label: str                  # the folder's class name (LEAK, NOLEAK, ...)
    path: Path
    mel: np.ndarray             # (clips, n_long, n_short, n_mels, n_frames) float32, time order

    @property
    def is_leak(self) -> bool:
        return self.label == LEAK_CLASS


def load_recordings(root: Path, detector: Detector,
                    min_clip_fraction: float) -> list[RealRecording]:
    """Every recording under ``root`` (class folders), cut and turned into features."""
    recordings = discover(Path(root), GROUP_BY)
    classes = sorted({r.label for r in recordings})
    if LEAK_CLASS not in classes or classes == [LEAK_CLASS]:
        raise DataError(f"{root}: need LEAK and non-LEAK recordings (<root>/LEAK/*.wav, "
                        f"<root>/NOLEAK/*.wav), found classes {classes}")
    out = []
    for rec in recordings:
        clips = load_clips(rec.path, detector.features, None, min_clip_fraction)  # (C, samples)
        out.append(RealRecording(rec.recording_id, rec.label, rec.path,
                                 clip_features(clips, detector.features)))
    return out


def segment_probs(detector: Detector, mel: np.ndarray, scoring: Scoring) -> np.ndarray:
    """(clips, L, S, M, T) -> (clips, L, S) segment leak probabilities (predict's path)."""
    runtime = scoring.runtime
    model = detector.inference_model().to(runtime.device)
    return score_segments(detector, model, mel, runtime,
                          scoring.rules.limits.cap(runtime.device))


def clip_scores(detector: Detector, seg_probs: np.ndarray) -> np.ndarray:
    """(clips, L, S) -> (clips,): each clip's rule score, ``LEAK <=> score >= threshold``."""
    voting = detector.voting
    return file_scores(seg_probs, voting.rule, voting.vote_fraction).astype(np.float64)


def recording_score(detector: Detector, seg_probs: np.ndarray) -> float:
    """All long segments of a recording's clips voted together, as `predict` decides."""
    probs = seg_probs.reshape(1, -1, seg_probs.shape[-1])             # (1, clips * L, S)
    return float(clip_scores(detector, probs)[0])


@dataclass(frozen=True)
class Scored:
    """Clip scores of several recordings and each recording's own (predict-style) score."""

    table: ClipTable
    recording_scores: dict[str, float]


def score_recordings(detector: Detector, recordings: list[RealRecording],
                     scoring: Scoring) -> Scored:
    """Score every clip of every recording with ``detector``."""
    parts, whole = [], {}
    for rec in recordings:
        probs = segment_probs(detector, rec.mel, scoring)             # (clips, L, S)
        parts.append(ClipTable(clip_scores(detector, probs),
                               np.full(len(rec.mel), int(rec.is_leak)),
                               np.full(len(rec.mel), rec.recording_id, dtype=object)))
        whole[rec.recording_id] = recording_score(detector, probs)
    return Scored(ClipTable.concat(parts), whole)
