"""One recording's explanation: its votes over time and each band group's share in the call.

Read, cut and turned into features by predict's ``prepare`` and scored by predict's
``score_segments`` (the detector's input normalisation, batches, inference form), so the
unoccluded numbers are exactly the ones `leakpipe predict` reports for the file. Two passes over
the recording, a part (about one batch of clips) at a time as predict reads it: the first
scores it and finds its fill level (``occlusion``), the second scores every band group's
occluded copy of each part, all groups in one call. Only probabilities and per-long-segment
band levels are kept, not features.

What a person reads is on predict's one scale: the verdict, ``leak_prob`` and ``threshold`` (the
operating point through the calibration), as predict's row shows them
(``decision.verdict``), with the recording's domain check (its band profile, as predict's
``domain_fields``); the rule's raw score and raw threshold, on which the call is taken and
segments vote, are labelled ``raw_``. Occlusion moves the raw score (``raw_drop``); each
group's ``leak_prob_without`` gives the same on the reader's scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from leakpipe.audio.opening import AudioSource
from leakpipe.config import QualityConfig
from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.domain import band_profile
from leakpipe.decision.verdict import call_fields, shown, with_verdict
from leakpipe.decision.voting import file_scores, long_segment_probs, min_votes
from leakpipe.detector import Detector
from leakpipe.explain.level import Level, waveform_level
from leakpipe.explain.occlusion import (
    BandGroup,
    band_groups,
    clip_levels,
    occluded,
    pushes,
    recording_level,
)
from leakpipe.predict.inputs import prepare
from leakpipe.predict.rows import DECIMALS, STATUS_OK, domain_fields
from leakpipe.predict.scoring import score_segments
from leakpipe.runtime import Runtime

# a smaller change of the score than the JSON's DECIMALS show is no push either way (a
# saturated score still moves by 1e-8)
MIN_CHANGE = 0.5 * 10.0 ** -DECIMALS


@dataclass(frozen=True)
class Explanation:
    """Every number the figure and the JSON show for one recording."""

    path: Path
    duration_s: float
    detector: Detector
    raw_score: float             # the rule's score (LEAK <=> raw_score >= detector.threshold)
    # every long segment of every clip in time order (one instant twice where two clips
    # overlap: lower clip first), as predict's timeline
    long_starts_s: np.ndarray    # (N,) start, seconds from the recording's start
    long_clips: np.ndarray       # (N,) the clip it belongs to (0, 1, ... from the start)
    long_probs: np.ndarray       # (N,) leak probability (mean of its short segments)
    band_db: np.ndarray          # (M, N) mean log-mel of each band in each long segment, dB
    groups: list[BandGroup]
    fill: str
    fill_db: float               # the level occluded bands were set to, dB
    scores_without: np.ndarray   # (G,) the rule's score with each group occluded
    long_drop: np.ndarray        # (G, N) long-segment probability minus that without the group
    level: Level
    # the CNN's recording probability as a fused detector reads it (the mean of its clips'
    # rule scores, float64), and the same with each group occluded
    recording_prob: float = float("nan")
    recording_probs_without: np.ndarray = field(default_factory=lambda: np.zeros(0))   # (G,)
    notes: str = ""
    domain: dict[str, Any] = field(default_factory=dict)   # predict's domain fields

    @property
    def decision(self) -> str:
        return DECISION_NAMES[int(self.raw_score >= self.detector.threshold)]

    @property
    def shown(self) -> dict[str, Any]:
        """What predict's row says of the call: ``verdict``, ``decision``, ``leak_prob`` and
        ``threshold`` on one scale, the domain fields and ``notes`` (a shifted recording's
        with what to do)."""
        det = self.detector
        return with_verdict({"status": STATUS_OK, **call_fields(
            self.raw_score, det.threshold, det.leak_prob(self.raw_score), det.prob_threshold),
            **self.domain, "notes": self.notes})

    def leak_prob_without(self, group: int) -> float:
        """The shown leak_prob with ``group`` occluded."""
        det, raw = self.detector, float(self.scores_without[group])
        return shown(det.leak_prob(raw), det.prob_threshold, raw >= det.threshold)[0]

    @property
    def drops(self) -> np.ndarray:
        """(G,) how much each group's occlusion lowers the raw score (> 0: it pushed to
        LEAK)."""
        return self.raw_score - self.scores_without

    @property
    def towards_leak(self) -> list[int]:
        """Groups whose occlusion lowers the score by at least ``MIN_CHANGE``, largest drop
        first (ties: lower band first)."""
        return pushes(self.drops, MIN_CHANGE)[0]

    @property
    def towards_noleak(self) -> list[int]:
        """Groups whose occlusion raises the score by at least ``MIN_CHANGE``, largest rise
        first (ties: lower band first)."""
        return pushes(self.drops, MIN_CHANGE)[1]

    @property
    def votes_needed(self) -> int:
        """Long segments at or above the threshold that make a LEAK (rule long_vote)."""
        return min_votes(len(self.long_probs), self.detector.voting.vote_fraction)


def explain_recording(recording: Path | AudioSource, detector: Detector, model: nn.Module, *,
                      runtime: Runtime, budget: int, min_fraction: float, bands_per_group: int,
                      fill: str, quality: QualityConfig | None = None) -> Explanation:
    """Score ``recording`` as predict does, then with each band group occluded (see module).

    Raises ``AudioError`` (a ``DataError`` naming the file) as predict's reading does, and
    ``Unusable`` for a signal that fails a refused check of ``quality`` (predict's rules).
    """
    f = detector.features
    max_clips = max(1, budget // (f.n_long * f.n_short))
    groups = band_groups(f, bands_per_group)
    starts, probs, stats, bands, profiles = [], [], [], [], []
    notes, duration, band_hz = "", 0.0, 0.0
    for part in prepare(recording, detector, min_fraction, max_clips, quality):
        starts.append(part.starts_s)
        probs.append(score_segments(detector, model, part.mel, runtime, budget))
        stats.append(clip_levels(part.mel, fill))
        bands.append(part.mel.mean(axis=(2, 4)))                       # (clips, L, M)
        profiles.append(band_profile(part.mel) * len(part.mel))        # as predict weighs it
        notes, duration, band_hz = part.notes, part.duration_s, part.band_hz
    fill_db = recording_level(np.concatenate(stats))
    hidden = [_occluded_probs(part.mel, groups, fill_db, detector, model, runtime, budget)
              for part in prepare(recording, detector, min_fraction, max_clips, quality)]
    voting = detector.voting
    base = np.concatenate(probs)                                       # (clips, L, S)
    n_short = base.shape[-1]
    by_clip = np.concatenate(hidden, axis=1).astype(np.float64)        # (G, clips, L, S)
    without = by_clip.reshape(len(groups), -1, n_short)                # (G, N, S)
    long_probs = long_segment_probs(base.reshape(1, -1, n_short))[0]   # (N,) clip order
    offsets = np.arange(base.shape[1]) * f.long_hop / f.sample_rate    # (L,)
    long_starts = np.round(np.concatenate(starts)[:, None] + offsets[None, :],
                           DECIMALS).reshape(-1)                       # (N,)
    clips = np.repeat(np.arange(base.shape[0]), base.shape[1])        # (N,)
    order = np.argsort(long_starts, kind="stable")   # time order, as predict's timeline
    return Explanation(
        path=Path(recording.path if isinstance(recording, AudioSource) else recording),
        duration_s=duration, detector=detector,
        raw_score=float(file_scores(base.reshape(1, -1, n_short), voting.rule,
                                    voting.vote_fraction)[0]),
        long_starts_s=long_starts[order], long_clips=clips[order], long_probs=long_probs[order],
        band_db=np.concatenate(bands).reshape(-1, f.n_mels).T[:, order],
        groups=groups, fill=fill, fill_db=fill_db,
        scores_without=file_scores(without, voting.rule, voting.vote_fraction),
        long_drop=(long_probs[None, :] - long_segment_probs(without))[:, order],
        level=waveform_level(recording, f.long_hop_s), notes=notes,
        domain=domain_fields(detector, np.sum(profiles, axis=0) / len(base), band_hz),
        recording_prob=float(_mean_clip_score(base[None].astype(np.float64), voting)[0]),
        recording_probs_without=_mean_clip_score(by_clip, voting))


def _mean_clip_score(probs: np.ndarray, voting: Any) -> np.ndarray:
    """(G, clips, L, S) -> (G,) the mean of the clips' rule scores."""
    g, clips = probs.shape[:2]
    scores = file_scores(probs.reshape(g * clips, *probs.shape[2:]), voting.rule,
                         voting.vote_fraction)
    return scores.reshape(g, clips).mean(axis=1)


def _occluded_probs(mel: np.ndarray, groups: list[BandGroup], fill_db: float,
                    detector: Detector, model: nn.Module, runtime: Runtime,
                    budget: int) -> np.ndarray:
    """(clips, L, S, M, T) -> (G, clips, L, S): the part scored with each group occluded, all
    groups in one call (batches of whole clips, as predict's)."""
    stacked = np.concatenate([occluded(mel, g, fill_db) for g in groups])  # (G * clips, ...)
    scored = score_segments(detector, model, stacked, runtime, budget)      # (G * clips, L, S)
    return scored.reshape(len(groups), len(mel), *scored.shape[1:])


def to_json(ex: Explanation) -> dict[str, Any]:
    """The explanation's numbers, rounded as predict rounds its CSV: the call on predict's one
    scale first, then the raw rule score and threshold it is taken on (``raw_``)."""
    det, voting = ex.detector, ex.detector.voting

    def r(values: np.ndarray | float) -> Any:   # float64 first: 0.0474, not 0.04740000143
        return np.round(np.asarray(values, dtype=np.float64), DECIMALS).tolist()

    call = ex.shown
    return {
        "path": str(ex.path), "verdict": call["verdict"], "decision": call["decision"],
        "leak_prob": call["leak_prob"], "threshold": call["threshold"],
        "raw_score": r(ex.raw_score), "raw_threshold": det.threshold, "rule": voting.rule,
        "prob_mode": voting.prob_mode, "vote_fraction": voting.vote_fraction,
        "input_norm": det.input_norm, "duration_s": r(ex.duration_s),
        "domain": call["domain"], "domain_distance": _number(call["domain_distance"]),
        "domain_reason": call["domain_reason"], "notes": call["notes"],
        "long_segments": {
            "starts_s": r(ex.long_starts_s), "clips": ex.long_clips.tolist(),
            "probs": r(ex.long_probs),
            "at_or_over_raw_threshold": int((ex.long_probs >= det.threshold).sum()),
            "count": len(ex.long_probs), "votes_needed_long_vote": ex.votes_needed},
        "level": {"window_s": r(ex.level.window_s), "starts_s": r(ex.level.starts_s),
                  "dbfs": r(ex.level.dbfs)},
        "occlusion": {"fill": ex.fill, "fill_db": r(ex.fill_db),
                      "towards_leak": ex.towards_leak, "towards_noleak": ex.towards_noleak,
                      "groups": [{"group": g, "mel_bands": [b.first, b.last],
                                  "hz": [r(b.low_hz), r(b.high_hz)],
                                  "raw_score_without": r(ex.scores_without[g]),
                                  "raw_drop": r(ex.drops[g]),
                                  "leak_prob_without": ex.leak_prob_without(g),
                                  "decision_without": DECISION_NAMES[
                                      int(ex.scores_without[g] >= det.threshold)],
                                  "long_drop": r(ex.long_drop[g])}
                                 for g, b in enumerate(ex.groups)]},
    }


def _number(value: Any) -> Any:
    """A row's figure for JSON: None for a blank one."""
    return None if value == "" else value
