"""The test split scored by one registered detector, for `leakpipe promote`.

Each detector is fetched from the registry and scores the split through evaluate's scoring
path, then decides every clip at **its own** saved operating point (probability mode, rule,
vote fraction, threshold). This is the part of promote that loads torch and a network, so
``promotion.run_promote`` imports it only once a comparison needs scores: the answers that
need none (a dry run with no champion yet, candidate and champion the same version) come
without it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leakpipe import tracking
from leakpipe.allocator import retain_freed_memory
from leakpipe.config import EvaluateConfig, RuntimeConfig
from leakpipe.decision.voting import file_scores
from leakpipe.detector import Detector, load_detector
from leakpipe.errors import DataError
from leakpipe.evaluate.bootstrap import f1_from_counts, weighted_counts
from leakpipe.evaluate.detector_evaluation import batch_limits, read_file_table
from leakpipe.preload.plan import read_plan
from leakpipe.runtime import Runtime, make_runtime
from leakpipe.scoring.batching import BatchLimits, open_batches
from leakpipe.scoring.score import score_batches
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
    """One detector's decisions on the test split, one per clip (an HDF5 row, the unit the
    voting rule decides), in split order."""

    truth: np.ndarray          # (F,) bool: LEAK
    decision: np.ndarray       # (F,) bool: decided LEAK at the detector's own point
    recording_id: np.ndarray   # (F,) the unit the bootstrap resamples

    @property
    def f1(self) -> float:
        counts = weighted_counts(self.truth, self.decision, np.ones((1, len(self.truth))))
        return float(f1_from_counts(counts)[0])


def scoring_setup(plan: Path, cfg: EvaluateConfig, rt: RuntimeConfig,
                  progress: bool) -> ScoringSetup:
    """The preload plan's placement, evaluate's batch limits and the runtime, for both."""
    placed = read_plan(plan)
    retain_freed_memory()                 # CPU inference reuses its activation buffers
    return ScoringSetup(placed["placement"], batch_limits(placed, cfg),
                        make_runtime(rt.device, rt.amp, rt.channels_last), progress)


def score_test_split(detector: Detector, path: Path, setup: ScoringSetup,
                     desc: str) -> SplitDecisions:
    """Score ``path`` with ``detector`` (evaluate's scoring path) and decide each clip at the
    detector's own saved operating point."""
    table = read_file_table(path, detector)
    runtime = setup.runtime
    batches = open_batches(path, setup.placement, detector.model_cfg, runtime.device,
                           setup.limits, detector.binary, detector.input_norm)
    info = batches.info
    scores = score_batches(detector.inference_model().to(runtime.device), batches,
                           segments=tuple(info.segment_shape[:2]), leak_index=info.leak_label,
                           prob_mode=detector.voting.prob_mode, runtime=runtime,
                           progress=setup.progress, desc=desc, total=len(batches))
    voting = detector.voting
    clip_score = file_scores(scores.seg_probs, voting.rule, voting.vote_fraction)   # (F,)
    return SplitDecisions(table.truth, clip_score >= detector.threshold,
                          np.asarray(table.recording_id))


def score_version(version: DetectorVersion, alias: str, path: Path,
                  setup: ScoringSetup) -> SplitDecisions:
    """``score_test_split`` for a registered version; its errors name the version."""
    try:
        detector = load_detector(tracking.download_model(version.uri))
        log.info("%s (%s): %s at threshold %g", version.label, alias, detector.voting.rule,
                 detector.threshold)
        return score_test_split(detector, path, setup, f"promote {alias}")
    except DataError as exc:
        raise DataError(f"{version.label} ({alias}): {exc}") from None
