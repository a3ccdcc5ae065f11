"""The test split's recordings decided by one registered detector, of any kind, for `leakpipe
promote`.

Each detector is fetched from the registry and decides every **recording** of the test split
at its own saved operating point, as it would if it served (``leakpipe.serve``): one verdict per
recording, whatever the kind, so that a `logger_stats` candidate and a `cnn` champion (or any
two kinds) are compared on the same units. A kind decides through its ``decide_split``
(``leakpipe.detectors``), which calls the built-in kinds' functions here:

- ``cnn``: the split is scored through evaluate's scoring path, each clip gets the detector's
  rule score (its probability mode, rule and vote fraction) and a recording the mean of its
  clips' scores, decided at the detector's threshold: the CNN's recording score of `ship`
  (its test recording figures, the version's tag), `crossval` and the `fused` kind, so the
  candidate's F1 here is the one ship reported;
- ``logger_stats``: the recording statistics stored with the split (the same ones build and
  ship computed; the split's statistics settings must be the detector's) go through the
  detector's model, decided at its threshold;
- ``fused``: the CNN part's recording score as for ``cnn`` (``evaluate.recording_scores``, the
  function `ship` stacked the part on) and the statistics part's from the stored statistics
  as for ``logger_stats`` (the same settings required), stacked by the detector's stacker and
  decided at its own threshold on the stacked probability.

This is the part of promote that loads torch and a network, so ``promotion.run_promote``
imports it only once a comparison needs scores: the answers that need none (a dry run with no
champion yet, candidate and champion the same version) come without it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe import tracking
from leakpipe.allocator import retain_freed_memory
from leakpipe.config import EvaluateConfig, RecordingStatsConfig, RuntimeConfig, from_mapping
from leakpipe.data.reader import open_split
from leakpipe.decision.verdict import DECIMALS
from leakpipe.detector import Detector
from leakpipe.detectors.registry import kind_of, load_any_detector
from leakpipe.errors import DataError
from leakpipe.evaluate.bootstrap import f1_from_counts, weighted_counts
from leakpipe.evaluate.detector_evaluation import batch_limits, read_file_table
from leakpipe.evaluate.recording_scores import cnn_recording_scores
from leakpipe.preload.plan import read_plan
from leakpipe.runtime import Runtime, make_runtime
from leakpipe.scoring.batching import BatchLimits
from leakpipe.stats_detector import FusedDetector, StatsDetector
from leakpipe.tracking import DetectorVersion

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoringSetup:
    """How the test split is placed and run, resolved once for both detectors."""

    placement: str
    limits: BatchLimits
    runtime: Runtime
    progress: bool


@dataclass(frozen=True)
class SplitDecisions:
    """One detector's verdicts on the test split, one per recording, in recording-id order."""

    truth: np.ndarray          # (R,) bool: the recording is LEAK
    decision: np.ndarray       # (R,) bool: decided LEAK at the detector's own point
    recording_id: np.ndarray   # (R,) sorted: the unit the bootstrap resamples

    @property
    def f1(self) -> float:
        counts = weighted_counts(self.truth, self.decision, np.ones((1, len(self.truth))))
        return float(f1_from_counts(counts)[0])


def per_recording(truth: np.ndarray, scores: np.ndarray, recording_id: np.ndarray,
                  threshold: float) -> SplitDecisions:
    """(R,) truth and scores of recordings in any order -> their verdicts in id order."""
    order = np.argsort(np.asarray(recording_id).astype(str), kind="stable")
    return SplitDecisions(np.asarray(truth, dtype=bool)[order],
                          np.asarray(scores)[order] >= threshold,
                          np.asarray(recording_id).astype(str)[order])


def scoring_setup(plan: Path, cfg: EvaluateConfig, rt: RuntimeConfig,
                  progress: bool) -> ScoringSetup:
    """The preload plan's placement, evaluate's batch limits and the runtime, for both."""
    placed = read_plan(plan)
    retain_freed_memory()                 # CPU inference reuses its activation buffers
    return ScoringSetup(placed["placement"], batch_limits(placed, cfg),
                        make_runtime(rt.device, rt.amp, rt.channels_last), progress)


def cnn_decisions(detector: Detector, path: Path, setup: ScoringSetup,
                  desc: str) -> SplitDecisions:
    """Score ``path`` with a cnn ``detector`` (evaluate's scoring path); a recording's score is
    the mean of its clips' rule scores, decided at the detector's own threshold."""
    table = read_file_table(path, detector)
    ids, inverse = np.unique(np.asarray(table.recording_id).astype(str), return_inverse=True)
    recording_score = _cnn_scores(detector, path, inverse, len(ids), setup, desc)   # (R,)
    truth = np.zeros(len(ids), dtype=bool)
    truth[inverse] = table.truth
    return per_recording(truth, recording_score, ids, detector.threshold)


def stats_decisions(detector: StatsDetector, path: Path, setup: ScoringSetup,
                    desc: str) -> SplitDecisions:
    """A logger_stats ``detector``'s verdict on each recording of ``path`` from the statistics
    stored with it (a recording's clips are consecutive rows and share them)."""
    stored = stored_recordings(path, detector.stats, detector.kind)
    log.info("%s: %d recordings from their statistics", desc, len(stored.recording_id))
    return per_recording(stored.truth, detector.probability(stored.stats), stored.recording_id,
                         detector.threshold)


def fused_decisions(detector: FusedDetector, path: Path, setup: ScoringSetup,
                    desc: str) -> SplitDecisions:
    """A fused ``detector``'s verdict on each recording of ``path``: its CNN part's recording
    score as `ship` computes it (``evaluate.recording_scores``), its statistics part's from the
    statistics stored with the split, stacked, decided at the detector's own threshold."""
    read_file_table(path, detector.cnn)          # the split's classes and features: the CNN's
    stored = stored_recordings(path, detector.logger_stats.stats, detector.kind)
    cnn_prob = _cnn_scores(detector.cnn, path, stored.clip_recording, len(stored.recording_id),
                           setup, desc)                                              # (R,)
    log.info("%s: %d recordings from their clips and statistics", desc,
             len(stored.recording_id))
    return per_recording(stored.truth, detector.probability(cnn_prob, stored.stats),
                         stored.recording_id, detector.threshold)


def _cnn_scores(cnn: Detector, path: Path, clip_recording: np.ndarray, n: int,
                setup: ScoringSetup, desc: str) -> np.ndarray:
    return cnn_recording_scores(cnn, path, clip_recording, n, placement=setup.placement,
                                limits=setup.limits, runtime=setup.runtime,
                                progress=setup.progress, desc=desc)


@dataclass(frozen=True)
class StoredRecordings:
    """A split's recordings (in order of their first row) with the statistics stored with it."""

    recording_id: np.ndarray    # (R,) str
    truth: np.ndarray           # (R,) bool: the recording is LEAK
    stats: np.ndarray           # (R, S_all) in ``stat_names`` order
    clip_recording: np.ndarray  # (F,) each clip's (row's) index into the recordings


def stored_recordings(path: Path, settings: RecordingStatsConfig, kind: str) -> StoredRecordings:
    """The recordings of ``path`` and their statistics, which must have been computed with the
    ``settings`` of the ``kind`` of detector that reads them (a ``DataError`` otherwise)."""
    with open_split(path) as split:
        if not split.has_stats:
            raise DataError(f"{path}: the split holds no recording statistics, which a "
                            f"{kind} detector reads; rebuild it with build.stats")
        stored = from_mapping(RecordingStatsConfig, split.stats_config, "stats", str(path))
        if stored != settings:
            raise DataError(f"{path}: its recording statistics were computed with other "
                            f"settings ({stored}) than the detector's ({settings}); "
                            "rebuild the split")
        ids = np.asarray(split.recording_ids).astype(str)
        starts = np.r_[True, ids[1:] != ids[:-1]]
        first = np.flatnonzero(starts)                                      # (R,)
        truth = split.binary_labels[first].astype(bool)
        stats = split.recording_stats[first]                                # (R, S_all)
    if len(np.unique(ids[first])) != len(first):
        raise DataError(f"{path}: a recording's clips are not consecutive rows; rebuild it")
    return StoredRecordings(ids[first], truth, stats, np.cumsum(starts) - 1)


def decide_split(detector: Any, path: Path, setup: ScoringSetup, desc: str) -> SplitDecisions:
    """The verdicts of a detector of any kind (its kind's ``decide_split``) on ``path``'s
    recordings."""
    return kind_of(detector).decide_split(detector, path, setup, desc)


def score_version(version: DetectorVersion, alias: str, path: Path,
                  setup: ScoringSetup) -> SplitDecisions:
    """``decide_split`` for a registered version; its errors name the version."""
    try:
        detector = load_any_detector(tracking.download_model(version.uri))
        log.info("%s (%s): a %s detector, leak_prob threshold %.*f (raw %g), the scale "
                 "predict shows", version.label, alias, detector.kind, DECIMALS,
                 detector.prob_threshold, detector.threshold)
        return decide_split(detector, path, setup, f"promote {alias}")
    except DataError as exc:
        raise DataError(f"{version.label} ({alias}): {exc}") from None
