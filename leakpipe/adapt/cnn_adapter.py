"""The CNN kind's part of the adapt rounds (``leakpipe.adapt.adapter.Adapter``).

- The field recordings are read once into features, as `leakpipe predict` reads them
  (``field.load_field``), and scored through the one scoring path (``field.score_detector``).
- A round fine-tunes the standing round's network with the train stage's ``fit()`` on the
  split the standing round wrote (the labelled train split plus the pool's kept long
  segments: ``round_split.write_round_split``), then re-chooses the operating point and the
  calibration on val as evaluate does (``rounds.choose_on_val``); the guard reads its val clip
  F1.
- Its outputs: the network (models/adapted.pt) and the detector (models/adapted_detector.pt).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from leakpipe.adapt.adapter import DETECTOR_FILE, AdaptContext, Candidate
from leakpipe.adapt.field import (
    FieldScores,
    FieldSet,
    check_recordings,
    domain_summary,
    load_field,
    pool_recordings,
    score_detector,
)
from leakpipe.adapt.pseudo import PoolLabels
from leakpipe.adapt.round_split import write_round_split
from leakpipe.adapt.rounds import ValChoice, choose_on_val, fine_tune
from leakpipe.adapt.state import AdaptState
from leakpipe.detector import Detector, Network, load_detector, save_detector, save_network
from leakpipe.evaluate.detector_evaluation import batch_limits
from leakpipe.evaluate.registration import network_text
from leakpipe.predict.rules import ScoringRules, batch_budget
from leakpipe.preload.plan import read_plan
from leakpipe.tracking import Tracker

log = logging.getLogger(__name__)

NETWORK_FILE = "network.pt"       # a round's network: what the next round fine-tunes


def read_field(detector: Network, context: AdaptContext) -> tuple[FieldSet, FieldSet | None]:
    """The pool and the labelled check set (None: none given) in ``detector``'s features."""
    a, progress = context.cfgs.adapt, context.progress
    min_fraction = context.cfgs.build.min_clip_fraction
    pool = load_field(pool_recordings(Path(a.source)), detector, min_fraction, desc="pool",
                      progress=progress)
    if not a.check:
        return pool, None
    items = check_recordings(Path(a.check))
    return pool, load_field([(k, p) for k, p, _ in items], detector, min_fraction,
                            labels=[y for *_, y in items], desc="check", progress=progress)


class CnnAdapter:
    """Fine-tunes a CNN detector; ``seed_file`` is its file (round 1 fine-tunes from it; None:
    from round 0's saved network, a fused detector's CNN part); ``field`` the recordings when
    already read (the fused kind keeps those both parts read)."""

    unit = "clip"
    sections = ("adapt", "train", "decision", "evaluate", "build")

    def __init__(self, seed: Detector, context: AdaptContext, *, seed_file: Path | None,
                 field: tuple[FieldSet, FieldSet | None] | None = None) -> None:
        self.context, self.seed_detector, self.seed_file = context, seed, seed_file
        self.plan = read_plan(context.paths.plan)
        self.pool, self.check = field if field is not None else read_field(seed, context)
        rules = ScoringRules(batch_limits(self.plan, context.cfgs.evaluate),
                             context.cfgs.build.min_clip_fraction)
        self.budget = batch_budget(seed, rules, context.runtime)
        self.pool_keys = self.pool.keys
        self.check_keys = self.check.keys if self.check is not None else None
        self.check_truth = self.check.truth if self.check is not None else None

    def seed(self) -> Candidate:
        return self._candidate(self.choose(self.seed_detector))

    def round_params(self, r: int, state: AdaptState) -> dict[str, Any]:
        a = self.context.cfgs.adapt
        return {"init": str(self.init_weights(state)), "epochs": a.epochs,
                "learning_rate": a.learning_rate}

    def init_weights(self, state: AdaptState) -> Path:
        """The standing round's network, or the seed's file while no round was accepted."""
        if self.seed_file is not None:
            return state.init_weights(self.seed_file)
        return state.round_dir(state.accepted["round"]) / NETWORK_FILE

    def refit(self, r: int, state: AdaptState, tracker: Tracker) -> Candidate:
        return self._candidate(self.choose(self.fine_tune(r, state, tracker)))

    def fine_tune(self, r: int, state: AdaptState, tracker: Tracker) -> Network:
        """Round ``r``'s network: the standing one fine-tuned on the split it left."""
        c, a = self.context.cfgs, self.context.cfgs.adapt
        init = self.init_weights(state)
        log.info("adapt round %d: fine-tune from %s", r, init)
        folder = state.round_dir(r)
        return fine_tune(init, folder / "train.h5", self.context.paths.val, self.plan,
                         self.seed_detector, c.train, c.decision, epochs=a.epochs,
                         learning_rate=a.learning_rate, runtime=self.context.runtime,
                         tracker=tracker, checkpoint_dir=folder / "checkpoints",
                         progress=self.context.progress)

    def choose(self, network: Network) -> ValChoice:
        """``network``'s operating point and calibration chosen on val as evaluate chooses
        them; the seed's domain reference and signal checks carried over."""
        c, seed = self.context.cfgs, self.seed_detector
        return choose_on_val(network, self.context.paths.val, self.plan, c.decision, c.evaluate,
                             self.context.runtime, c.build.min_clip_fraction,
                             domain=seed.domain, quality=seed.quality)

    @staticmethod
    def _candidate(choice: ValChoice) -> Candidate:
        return Candidate(choice.detector, choice.figures)

    def scores(self, detector: Detector, which: str) -> FieldScores:
        field = self.pool if which == "pool" else self.check
        assert field is not None
        return score_detector(detector, field, self.context.runtime, self.budget)

    def write_next(self, folder: Path, scores: FieldScores, labels: PoolLabels,
                   detector: Detector, seed: int) -> dict[str, Any]:
        split = write_round_split(folder / "train.h5", self.context.paths.train, self.pool,
                                  scores, labels.pseudo, detector,
                                  ratio=self.context.cfgs.adapt.pseudo_per_labelled, seed=seed)
        return dataclasses.asdict(split)

    def save(self, detector: Detector, folder: Path) -> None:
        save_network(folder / NETWORK_FILE, detector)
        save_detector(folder / DETECTOR_FILE, detector)

    def write_final(self, folder: Path) -> None:
        detector = load_detector(folder / DETECTOR_FILE)
        save_network(self.context.paths.network, detector)
        save_detector(self.context.paths.adapted, detector)

    def domain(self) -> dict[str, Any]:
        out = {"pool": domain_summary(self.seed_detector, self.pool)}
        if self.check is not None:
            out["check"] = domain_summary(self.seed_detector, self.check)
        return out

    def describe(self) -> str:
        return network_text(self.seed_detector)


__all__ = ["CnnAdapter", "NETWORK_FILE", "read_field"]
