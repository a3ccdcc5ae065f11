"""The fused kind's part of the adapt rounds (``leakpipe.adapt.adapter.Adapter``).

The pool recordings are pseudo-labelled by the fused detector's own calls; a round then
adapts both parts on those labels and refits what joins them:

1. the CNN part fine-tuned as a CNN detector is (``cnn_adapter``: the train split plus the
   pool's kept long segments, chosen by the CNN part's own long-segment probabilities), its
   rule and operating point re-chosen on val;
2. the statistics part refitted as a logger_stats detector is (``stats_adapter``: train plus
   the pseudo-labelled pool recordings, C and threshold on val);
3. the stacker refitted on the val recordings' two part probabilities (``detector.fusion_C``,
   as ship fits it), the threshold and calibration chosen on its val probabilities.

The guard reads the stacked val recording F1. A stacker fitted on val can turn a part that
adaptation broke into evidence again by weighing it negatively (a part's LEAK logit counted
as evidence against a leak); such a round is rejected by the kind itself: each part's logit
means P(LEAK), so a negative weight says the part no longer measures what it did.
Only recordings both parts can read are used (the others listed as left out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.adapt.adapter import DETECTOR_FILE, AdaptContext, Candidate
from leakpipe.adapt.cnn_adapter import NETWORK_FILE, CnnAdapter, read_field
from leakpipe.adapt.field import FieldScores
from leakpipe.adapt.pseudo import PoolLabels
from leakpipe.adapt.state import AdaptState
from leakpipe.adapt.stats_adapter import StatsAdapter, read_stats_field, val_figures
from leakpipe.baselines.operating_point import choose_on_val
from leakpipe.cv.recording_level import fit_stacker
from leakpipe.decision.calibration import fit_platt
from leakpipe.decision.stacking import logit
from leakpipe.detector import Detector, save_network
from leakpipe.detectors.registry import load_any_detector
from leakpipe.evaluate.registration import network_text
from leakpipe.ship.fused_evaluation import cnn_recording_probs
from leakpipe.stats_detector import FUSED_PARTS, FusedDetector, save_fused_detector
from leakpipe.tracking import Tracker


class FusedAdapter:
    """Adapts a fused detector: both parts, then the stacker (module docstring)."""

    unit = "recording"
    sections = ("adapt", "train", "decision", "evaluate", "build", "baselines", "detector")

    def __init__(self, seed: FusedDetector, context: AdaptContext) -> None:
        self.context, self.seed_detector = context, seed
        stats_pool, stats_check = read_stats_field(seed.logger_stats, context)
        pool, check = read_field(seed.cnn, context)
        measured = set(stats_pool.keys)
        keys = tuple(k for k in pool.keys if k in measured)
        check_keys = None
        if check is not None and stats_check is not None:
            measured_check = set(stats_check.keys)
            check_keys = tuple(k for k in check.keys if k in measured_check)
        self.stats = StatsAdapter(seed.logger_stats, context, field=(
            stats_pool.subset(keys),
            stats_check.subset(check_keys) if stats_check is not None and check_keys else None))
        self.cnn = CnnAdapter(seed.cnn, context, seed_file=None, field=(
            pool.subset(keys), check.subset(check_keys) if check is not None and check_keys
            else None))
        self.pool_keys, self.check_keys = keys, self.cnn.check_keys
        self.check_truth = self.cnn.check_truth

    def seed(self) -> Candidate:
        seed = self.seed_detector
        scores = seed.probability(self._val_cnn(seed.cnn), self.stats.val.stats)
        return Candidate(seed, val_figures(self.stats.val.truth, scores, seed.threshold))

    def round_params(self, r: int, state: AdaptState) -> dict[str, Any]:
        return {**self.cnn.round_params(r, state), **self.stats.round_params(r, state),
                "fusion_C": self.context.cfgs.detector.fusion_C}

    def refit(self, r: int, state: AdaptState, tracker: Tracker) -> Candidate:
        cnn = self.cnn.choose(self.cnn.fine_tune(r, state, tracker)).detector
        stats, stats_val = self.stats.refit_detector(state.round_dir(r))
        truth, c = self.stats.val.truth, self.context.cfgs
        parts = [self._val_cnn(cnn), stats_val]                          # (R_val,) each
        stacker = fit_stacker(parts, truth, c.detector.fusion_C, FUSED_PARTS)
        scores = stacker.prob(logit(np.stack(parts, axis=1)))            # (R_val,)
        point = choose_on_val(scores, truth, c.evaluate, c.decision)
        detector = FusedDetector(cnn=cnn, logger_stats=stats, stacker=stacker,
                                 threshold=point.threshold,
                                 calibration=fit_platt(scores, truth), metrics={
                                     "eval/threshold": point.threshold,
                                     "eval/stacker_bias": stacker.bias})
        negative = [f"{n} {w:+.3f}" for n, w in zip(stacker.names, stacker.weights,
                                                   strict=True) if w < 0]
        reason = (f"the refitted stacker weighs {len(negative)} part(s) negatively "
                  f"({', '.join(negative)}): their LEAK evidence now counts against a leak"
                  if negative else "")
        return Candidate(detector, val_figures(truth, scores, point.threshold), reason)

    def _val_cnn(self, cnn: Detector) -> np.ndarray:
        """(R_val,) the CNN part's recording probabilities of the val recordings."""
        return cnn_recording_probs(cnn, self.context.paths.val, self.stats.val,
                                   self.context.runtime)

    def scores(self, detector: FusedDetector, which: str) -> FieldScores:
        """The stacked probability, with the CNN part's long segments (what it trains on)."""
        cnn = self.cnn.scores(detector.cnn, which)
        stats = (self.stats.pool if which == "pool" else self.stats.check)
        assert stats is not None
        probs = np.asarray([detector.cnn_probability(p) for p in cnn.seg_probs])
        return FieldScores(detector.probability(probs, stats.stats), cnn.long_probs,
                           cnn.class_probs)

    def write_next(self, folder: Path, scores: FieldScores, labels: PoolLabels,
                   detector: FusedDetector, seed: int) -> dict[str, Any]:
        return {**self.cnn.write_next(folder, scores, labels, detector.cnn, seed),
                **self.stats.write_next(folder, scores, labels, detector.logger_stats, seed)}

    def save(self, detector: FusedDetector, folder: Path) -> None:
        save_network(folder / NETWORK_FILE, detector.cnn)     # what the next round fine-tunes
        save_fused_detector(folder / DETECTOR_FILE, detector)

    def write_final(self, folder: Path) -> None:
        detector = load_any_detector(folder / DETECTOR_FILE)
        save_network(self.context.paths.network, detector.cnn)
        save_fused_detector(self.context.paths.adapted, detector)

    def domain(self) -> dict[str, Any]:
        return self.cnn.domain()

    def describe(self) -> str:
        return (f"fused: {network_text(self.seed_detector.cnn)} and "
                f"{len(self.seed_detector.logger_stats.net.names)} statistics")


__all__ = ["FusedAdapter"]
