"""The logger_stats kind's part of the adapt rounds (``leakpipe.adapt.adapter.Adapter``).

- The field recordings are measured once as `leakpipe predict` measures them
  (``field_stats.measure_field``).
- Round 0 is the seed as it stands: its threshold and its val figures. Every later round
  refits the statistics' model on the labelled train recordings plus the pool recordings the
  standing round pseudo-labelled (at most ``adapt.pseudo_per_labelled`` per train recording,
  a seeded subset beyond), as ship fits the kind (``baselines.logger_stats.fit_and_select``)
  with the val recordings held out: the strength ``C`` and the threshold chosen on val
  (``inner_folds: 1``), the Platt calibration fitted there. Val is never fitted, so the guard's
  figure (val recording F1) is a held-out one; a seed that ship fitted on train + val reads val
  in-sample, so its figure leans optimistic and the guard is strict, never lenient.
- The refitted detector keeps the seed's statistics settings and signal checks; its domain
  reference (missing shares, held-out distances) is that of the recordings it was fitted on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.adapt.adapter import DETECTOR_FILE, AdaptContext, Candidate
from leakpipe.adapt.field import FieldScores, check_recordings, pool_recordings
from leakpipe.adapt.field_stats import StatsField, joined, measure_field, pseudo_table
from leakpipe.adapt.pseudo import PoolLabels
from leakpipe.adapt.state import AdaptState
from leakpipe.baselines.logger_stats import fit_and_select, read_recordings
from leakpipe.decision.calibration import fit_platt
from leakpipe.decision.domain import SHIFTED
from leakpipe.decision.domain_set import set_check
from leakpipe.detectors.registry import load_any_detector
from leakpipe.errors import DataError
from leakpipe.evaluate.figures import binary_figures
from leakpipe.features.recording_stats import stat_names
from leakpipe.files import write_json_atomic
from leakpipe.ship.stats_evaluation import fitted_distances, fitted_missing_share
from leakpipe.stats_detector import StatsDetector, save_stats_detector
from leakpipe.tracking import Tracker

log = logging.getLogger(__name__)

PSEUDO_FILE = "pseudo.json"      # in a round's folder: the pool recordings it refits on


def read_stats_field(detector: StatsDetector, context: AdaptContext
                     ) -> tuple[StatsField, StatsField | None]:
    """The pool and the labelled check set (None: none given), measured by ``detector``."""
    a, progress = context.cfgs.adapt, context.progress
    pool = measure_field(pool_recordings(Path(a.source)), detector, desc="pool",
                         progress=progress)
    if not a.check:
        return pool, None
    items = check_recordings(Path(a.check))
    return pool, measure_field([(k, p) for k, p, _ in items], detector,
                               labels=[y for *_, y in items], desc="check", progress=progress)


def val_figures(truth: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    """Recording figures of (R,) val scores decided at ``threshold``."""
    figures = binary_figures(truth.astype(np.int64), scores >= threshold, scores)
    return {k: float(v) for k, v in figures.items()}


class StatsAdapter:
    """Refits a logger_stats detector (or a fused detector's statistics part)."""

    unit = "recording"
    sections = ("adapt", "decision", "evaluate", "build", "baselines")

    def __init__(self, seed: StatsDetector, context: AdaptContext,
                 field: tuple[StatsField, StatsField | None] | None = None) -> None:
        self.context, self.seed_detector = context, seed
        self.train = read_recordings(context.paths.train)
        self.val = read_recordings(context.paths.val)
        if self.train.names != tuple(stat_names(seed.stats)):
            raise DataError(f"{context.paths.train}: its recording statistics are not the ones "
                            "the detector measures (build.stats differs); rebuild the splits")
        self.pool, self.check = field if field is not None else read_stats_field(seed, context)
        self.pool_keys = self.pool.keys
        self.check_keys = self.check.keys if self.check is not None else None
        self.check_truth = self.check.truth if self.check is not None else None

    def seed(self) -> Candidate:
        scores = self.seed_detector.probability(self.val.stats)
        return Candidate(self.seed_detector,
                         val_figures(self.val.truth, scores, self.seed_detector.threshold))

    def round_params(self, r: int, state: AdaptState) -> dict[str, Any]:
        return {"refit": "logger_stats on train + pseudo-labelled pool, C and threshold on val",
                "C": list(self.context.cfgs.baselines.logger_stats.C)}

    def refit(self, r: int, state: AdaptState, tracker: Tracker) -> Candidate:
        detector, scores = self.refit_detector(state.round_dir(r))
        return Candidate(detector, val_figures(self.val.truth, scores, detector.threshold))

    def refit_detector(self, folder: Path) -> tuple[StatsDetector, np.ndarray]:
        """The model refitted on train + the pool recordings ``folder`` lists; its held-out
        val scores."""
        c = self.context.cfgs
        raw = json.loads((folder / PSEUDO_FILE).read_text())["labels"]
        labels = {k: int(v) for k, v in raw.items()}
        train = joined(self.train, pseudo_table(self.pool, labels, self.train.names))
        cfg = dataclasses.replace(c.baselines.logger_stats, inner_folds=1)
        fit = fit_and_select(train, self.val, cfg, c.evaluate, c.decision)
        log.info("adapt: logger_stats refitted on %d train + %d pseudo-labelled recordings: C %g, "
                 "threshold %g", len(self.train), len(labels), fit.c, fit.point.threshold)
        seed = self.seed_detector
        detector = StatsDetector(
            net=fit.net, stats=seed.stats, threshold=fit.point.threshold,
            calibration=fit_platt(fit.val_scores, self.val.truth), quality=seed.quality,
            missing_share=fitted_missing_share(train, self.val, fit.used, 1),
            val_distances=fitted_distances(train, self.val, fit.used, 1),
            metrics={"eval/C": fit.c, "eval/threshold": fit.point.threshold})
        return detector, fit.val_scores

    def scores(self, detector: StatsDetector, which: str) -> FieldScores:
        field = self.pool if which == "pool" else self.check
        assert field is not None
        scores = detector.probability(field.stats)
        return FieldScores(scores, [np.asarray([s]) for s in scores],
                           np.zeros((len(scores), 0)))

    def write_next(self, folder: Path, scores: FieldScores, labels: PoolLabels,
                   detector: StatsDetector, seed: int) -> dict[str, Any]:
        """The pseudo-labelled pool recordings the next round refits on (``PSEUDO_FILE``): at
        most ``adapt.pseudo_per_labelled`` per train recording, a seeded subset beyond."""
        kept = [k for k, v in labels.labels.items() if v is not None]
        cap = int(np.floor(self.context.cfgs.adapt.pseudo_per_labelled * len(self.train)))
        if len(kept) > cap:
            chosen = np.sort(np.random.default_rng(seed).choice(len(kept), cap, replace=False))
            kept = [kept[i] for i in chosen]
        write_json_atomic(folder / PSEUDO_FILE, {"labels": {k: labels.labels[k] for k in kept}})
        return {"labelled_recordings": len(self.train), "pseudo_recordings": len(kept),
                "pseudo_recordings_available": sum(v is not None
                                                   for v in labels.labels.values())}

    def save(self, detector: StatsDetector, folder: Path) -> None:
        save_stats_detector(folder / DETECTOR_FILE, detector)

    def write_final(self, folder: Path) -> None:
        save_stats_detector(self.context.paths.adapted, self.load(folder))
        log.info("adapt: a logger_stats detector has no network; %s not written",
                 self.context.paths.network)

    @staticmethod
    def load(folder: Path) -> StatsDetector:
        return load_any_detector(folder / DETECTOR_FILE)  # type: ignore[no-any-return]

    def domain(self) -> dict[str, Any]:
        out = {"pool": stats_domain_summary(self.seed_detector, self.pool)}
        if self.check is not None:
            out["check"] = stats_domain_summary(self.seed_detector, self.check)
        return out

    def describe(self) -> str:
        return f"logger_stats, {len(self.seed_detector.net.names)} statistics"


def stats_domain_summary(detector: StatsDetector, field: StatsField) -> dict[str, Any]:
    """Counts of ``in`` / ``shifted`` / ``unknown`` recordings under the statistics' domain
    check, the set check against the detector's held-out distances, each shifted recording's
    distance and reason (``field.domain_summary``'s shape)."""
    checks = {key: detector.domain(row) for key, row in zip(field.keys, field.stats, strict=True)}
    counts = [c.domain for c in checks.values()]
    whole = set_check(detector.set_reference, np.array([c.distance for c in checks.values()]))
    return {**{name: counts.count(name) for name in ("in", SHIFTED, "unknown")},
            "set": whole.to_dict(),
            "shifted_recordings": {key: f"{c.distance:.3f}: {c.reason}"
                                   for key, c in checks.items() if c.domain == SHIFTED}}


__all__ = ["PSEUDO_FILE", "StatsAdapter", "read_stats_field",
           "stats_domain_summary", "val_figures"]
