"""One adaptation round as its named steps, each in its own module.

Round 0 (``seed_round``) is the seed detector as it stands. Every later round
(``adapt_round``) goes:

1. fine-tune (``rounds.fine_tune``) the standing round's network on the split the standing
   round wrote, then re-choose its operating point on val (``rounds.choose_on_val``);
2. score the labelled field check set at that point (``scoring.check_figures``);
3. guard (``guard.rejection``): a round too far below the seed is recorded as rejected and
   adaptation stops; nothing of it stands;
4. otherwise accept it (as round 0 always is): its network and detector saved, the pool
   scored (``scoring.score_pool``) and pseudo-labelled (``pseudo.label_pool``), the next
   round's split written (``round_split.write_round_split``);
5. record (``record.record_round``): the MLflow runs, the log and the round state, last.

Each round runs in its own MLflow child run of the stage's run. A step gets what it reads
from the frozen ``AdaptInputs`` and the round state ``AdaptState`` and returns the next state.
"""

from __future__ import annotations

import logging

from leakpipe import tracking
from leakpipe.adapt.guard import rejection
from leakpipe.adapt.inputs import AdaptInputs
from leakpipe.adapt.pseudo import label_pool
from leakpipe.adapt.record import (
    ACCEPTED,
    REJECTED,
    SEED,
    STAGE,
    record_round,
    round_entry,
)
from leakpipe.adapt.report import round_run_name
from leakpipe.adapt.round_split import write_round_split
from leakpipe.adapt.rounds import ValChoice, choose_on_val, fine_tune
from leakpipe.adapt.scoring import check_figures, score_pool
from leakpipe.adapt.state import AdaptState
from leakpipe.detector import Network, save_detector, save_network

log = logging.getLogger(__name__)

ROUND_TAG = "leakpipe.adapt_round"


def seed_round(inputs: AdaptInputs, state: AdaptState,
               parent: tracking.Tracker) -> AdaptState:
    """Round 0: the seed detector as it stands, re-scored; its pseudo-labels feed round 1."""
    with tracking.start_run(STAGE, parent_run_id=parent.run_id,
                            tags={ROUND_TAG: "0"}) as child:
        child.set_tags({tracking.RUN_NAME_TAG: round_run_name(STAGE, 0)})
        choice = _choose(inputs, inputs.seed)
        check = check_figures(choice.detector, inputs.check, inputs.runtime, inputs.budget)
        return _accept(inputs, state, parent, child, 0, SEED, choice, check)


def adapt_round(inputs: AdaptInputs, state: AdaptState,
                parent: tracking.Tracker) -> AdaptState:
    """Round ``state.next_round``: fine-tune, check, guard, then accept or reject."""
    a, r = inputs.cfgs.adapt, state.next_round
    standing = state.accepted["round"]
    init = state.init_weights(inputs.paths.detector)
    folder = state.round_dir(r)
    with tracking.start_run(STAGE, parent_run_id=parent.run_id,
                            tags={ROUND_TAG: str(r)}) as child:
        child.set_tags({tracking.RUN_NAME_TAG: round_run_name(STAGE, r)})
        child.log_params({"round": r, "init": str(init), "epochs": a.epochs,
                          "learning_rate": a.learning_rate})
        log.info("adapt round %d: fine-tune from %s", r, init)
        network = fine_tune(init, folder / "train.h5", inputs.paths.val, inputs.plan,
                            inputs.seed, inputs.cfgs.train, inputs.cfgs.decision,
                            epochs=a.epochs, learning_rate=a.learning_rate,
                            runtime=inputs.runtime, tracker=child,
                            checkpoint_dir=folder / "checkpoints", progress=inputs.progress)
        choice = _choose(inputs, network)
        check = check_figures(choice.detector, inputs.check, inputs.runtime, inputs.budget)
        reason = rejection(r, state.seed, choice.figures["f1"],
                           check["f1"] if check is not None else None,
                           tolerance=a.tolerance, check_guard=a.check_guard, standing=standing)
        if reason:
            entry = round_entry(r, REJECTED, choice.point.threshold, choice.figures, check,
                                reason=reason)
            return record_round(state, entry, child, parent, rounds=a.rounds, margin=a.margin)
        return _accept(inputs, state, parent, child, r, ACCEPTED, choice, check)


def _choose(inputs: AdaptInputs, network: Network) -> ValChoice:
    c, seed = inputs.cfgs, inputs.seed
    return choose_on_val(network, inputs.paths.val, inputs.plan, c.decision, c.evaluate,
                         inputs.runtime, c.build.min_clip_fraction, domain=seed.domain,
                         quality=seed.quality)


def _accept(inputs: AdaptInputs, state: AdaptState, parent: tracking.Tracker,
            child: tracking.Tracker, r: int, status: str, choice: ValChoice,
            check: dict[str, float] | None) -> AdaptState:
    """Round ``r``'s detector stands: saved, the pool scored and pseudo-labelled, the next
    round's split written, the round recorded."""
    a, detector = inputs.cfgs.adapt, choice.detector
    folder = state.round_dir(r)
    save_network(folder / "network.pt", detector)
    save_detector(folder / "detector.pt", detector)
    scores = score_pool(detector, inputs.pool, inputs.runtime, inputs.budget)
    labels = label_pool(inputs.pool.keys, scores.scores, scores.long_probs, detector.threshold,
                        margin=a.margin, fraction=a.keep_fraction)
    split = None
    if r < a.rounds and labels.counts["segments"]:
        split = write_round_split(state.round_dir(r + 1) / "train.h5", inputs.paths.train,
                                  inputs.pool, scores, labels.pseudo, detector,
                                  ratio=a.pseudo_per_labelled, seed=a.seed + r + 1)
    entry = round_entry(r, status, detector.threshold, choice.figures, check, labels=labels,
                        previous=state.accepted["labels"] if r > 0 else None,
                        truth=inputs.truth, split=split)
    return record_round(state, entry, child, parent, rounds=a.rounds, margin=a.margin)
