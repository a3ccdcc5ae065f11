"""One adaptation round as its named steps, the same for every detector kind.

Round 0 (``seed_round``) is the seed detector as it stands. Every later round
(``adapt_round``) goes:

1. refit (the kind's ``Adapter.refit``: ``leakpipe.adapt.adapter``) from the standing round on
   train plus the pseudo-labelled pool the standing round left, its operating point re-chosen
   on val;
2. score the labelled field check set at that point (``check_figures``);
3. guard (``guard.rejection``, and the kind's own reason where it has one): a round too far
   below the seed is recorded as rejected and adaptation stops; nothing of it stands;
4. otherwise accept it (as round 0 always is): its detector saved, the pool scored and
   pseudo-labelled (``pseudo.label_pool``), what the next round trains on written;
5. record (``record.record_round``): the MLflow runs, the log and the round state, last.

Each round runs in its own MLflow child run of the stage's run. A step gets the kind's
adapter, the params and the round state ``AdaptState`` and returns the next state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from leakpipe import tracking
from leakpipe.adapt.adapter import Adapter, Candidate
from leakpipe.adapt.guard import rejection
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
from leakpipe.adapt.scoring import set_figures
from leakpipe.adapt.state import AdaptState
from leakpipe.config import AdaptConfig

log = logging.getLogger(__name__)

ROUND_TAG = "leakpipe.adapt_round"


def seed_round(adapter: Adapter, a: AdaptConfig, state: AdaptState, parent: tracking.Tracker,
               truth: Mapping[str, int] | None) -> AdaptState:
    """Round 0: the seed detector as it stands, re-scored; its pseudo-labels feed round 1."""
    with tracking.start_run(STAGE, parent_run_id=parent.run_id,
                            tags={ROUND_TAG: "0"}) as child:
        child.set_tags({tracking.RUN_NAME_TAG: round_run_name(STAGE, 0)})
        candidate = adapter.seed()
        check = check_figures(adapter, candidate.detector)
        return _accept(adapter, a, truth, state, parent, child, 0, SEED, candidate, check)


def adapt_round(adapter: Adapter, a: AdaptConfig, state: AdaptState,
                parent: tracking.Tracker, truth: Mapping[str, int] | None) -> AdaptState:
    """Round ``state.next_round``: refit, check, guard, then accept or reject."""
    r = state.next_round
    standing = state.accepted["round"]
    with tracking.start_run(STAGE, parent_run_id=parent.run_id,
                            tags={ROUND_TAG: str(r)}) as child:
        child.set_tags({tracking.RUN_NAME_TAG: round_run_name(STAGE, r)})
        child.log_params({"round": r, **adapter.round_params(r, state)})
        candidate = adapter.refit(r, state, child)
        check = check_figures(adapter, candidate.detector)
        reason = (f"round {r} rejected: {candidate.rejection}; round {standing}'s detector "
                  "stands" if candidate.rejection else
                  rejection(r, state.seed, candidate.figures["f1"],
                            check["f1"] if check is not None else None,
                            tolerance=a.tolerance, check_guard=a.check_guard,
                            standing=standing, unit=adapter.unit))
        if reason:
            entry = round_entry(r, REJECTED, candidate.detector.threshold, candidate.figures,
                                check, reason=reason)
            return record_round(state, entry, child, parent, rounds=a.rounds, margin=a.margin)
        return _accept(adapter, a, truth, state, parent, child, r, ACCEPTED, candidate, check)


def check_figures(adapter: Adapter, detector: object) -> dict[str, float] | None:
    """The labelled field check set's figures at the round's operating point (None without a
    check set)."""
    if adapter.check_truth is None:
        return None
    scores = adapter.scores(detector, "check")
    return set_figures(adapter.check_truth, scores.scores, detector.threshold)  # type: ignore[attr-defined]


def _accept(adapter: Adapter, a: AdaptConfig, truth: Mapping[str, int] | None,
            state: AdaptState, parent: tracking.Tracker, child: tracking.Tracker, r: int,
            status: str, candidate: Candidate, check: dict[str, float] | None) -> AdaptState:
    """Round ``r``'s detector stands: saved, the pool scored and pseudo-labelled, the next
    round's training data written, the round recorded."""
    detector = candidate.detector
    adapter.save(detector, state.round_dir(r))
    scores = adapter.scores(detector, "pool")
    labels = label_pool(adapter.pool_keys, scores.scores, scores.long_probs, detector.threshold,
                        margin=a.margin, fraction=a.keep_fraction)
    split = None
    if r < a.rounds and labels.counts["segments"]:
        split = adapter.write_next(state.round_dir(r + 1), scores, labels, detector,
                                   seed=a.seed + r + 1)
    entry = round_entry(r, status, detector.threshold, candidate.figures, check, labels=labels,
                        previous=state.accepted["labels"] if r > 0 else None,
                        truth=truth, split=split)
    return record_round(state, entry, child, parent, rounds=a.rounds, margin=a.margin)
