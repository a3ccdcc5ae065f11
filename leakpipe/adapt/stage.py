"""The adapt stage: field adaptation of the evaluated detector by rounds of pseudo-labelling.

``run_adapt`` is what `leakpipe adapt` (and stages/adapt.py) calls:

0. The seed detector (models/detector.pt) is re-scored on the labelled val split (its operating
   point re-chosen there, as evaluate chooses it), on the labelled field check set, and on the
   unlabelled pool, whose recordings get pseudo-labels (``leakpipe.adapt.pseudo``).
1. Each round fine-tunes the previous round's network with ``fit()`` on the labelled train
   split plus the pseudo-labelled pool segments, re-chooses the operating point on val and
   scores the labelled field check set: a round whose val clip F1 (with ``adapt.check_guard``
   also its check-set clip F1) falls more than ``adapt.tolerance`` below the seed detector's
   (round 0's, whichever round came before, so small losses cannot add up over rounds) is
   rejected, nothing of it is kept as the result, and adaptation stops with that reason. An
   accepted round's pool pseudo-labels feed the next round. The steps of a round, each in a
   module of its own, are listed in ``leakpipe.adapt.steps``.
2. The newest accepted round becomes models/adapted.pt and models/adapted_detector.pt, with
   metrics/adapt.json, the per-round table and figure, and one MLflow run with a child run
   per round (named ``adapt round 2 (accepted)``); with ``evaluate.registered_model`` set, the
   adapted detector is registered with the alias ``adapted`` (``leakpipe.adapt.outputs``).

This module resolves the inputs once (``AdaptInputs``: the field recordings are read here,
inside the stage's MLflow run's time span) and runs the rounds. Every round is recorded in
checkpoints/adapt (``leakpipe.adapt.state``), so a run killed between rounds (or inside a
round's ``fit()``) continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from leakpipe import tracking
from leakpipe.adapt.field import (
    FieldSet,
    check_recordings,
    domain_summary,
    load_field,
    pool_recordings,
    read_truth,
)
from leakpipe.adapt.inputs import AdaptInputs, AdaptPaths, AdaptSections
from leakpipe.adapt.outputs import write_outputs
from leakpipe.adapt.record import STAGE
from leakpipe.adapt.state import AdaptState, fingerprint
from leakpipe.adapt.steps import adapt_round, seed_round
from leakpipe.data.stamp import trust_splits
from leakpipe.detector import Detector, load_detector
from leakpipe.evaluate.detector_evaluation import batch_limits
from leakpipe.files import file_sha256
from leakpipe.predict.rules import ScoringRules, batch_budget
from leakpipe.preload.plan import read_plan
from leakpipe.runtime import make_runtime

log = logging.getLogger(__name__)

__all__ = ["AdaptPaths", "AdaptSections", "run_adapt"]


def run_adapt(paths: AdaptPaths, cfgs: AdaptSections, *, progress: bool = True) -> int:
    """Adapt; 0 on success (a rejected round is a result, not a failure)."""
    started = time.time()       # a new run spans the stage: decoding the field recordings too
    a = cfgs.adapt
    splits = {"train": paths.train, "val": paths.val}
    trust = trust_splits(paths.validated, splits)   # the bytes `validate` passed, as train's
    runtime = make_runtime(cfgs.runtime.device, cfgs.runtime.amp, cfgs.runtime.channels_last)
    seed = load_detector(paths.detector)
    plan = read_plan(paths.plan)
    min_fraction = cfgs.build.min_clip_fraction
    pool = load_field(pool_recordings(Path(a.source)), seed, min_fraction, desc="pool",
                      progress=progress)
    check = None
    if a.check:
        items = check_recordings(Path(a.check))
        check = load_field([(k, p) for k, p, _ in items], seed, min_fraction,
                           labels=[y for *_, y in items], desc="check", progress=progress)
    truth = read_truth(Path(a.pool_truth)) if a.pool_truth else None
    rules = ScoringRules(batch_limits(plan, cfgs.evaluate), min_fraction)
    state = AdaptState.open(paths.work, fingerprint({
        "params": {f.name: dataclasses.asdict(getattr(cfgs, f.name))
                   for f in dataclasses.fields(cfgs) if f.name != "runtime"},
        "detector": file_sha256(paths.detector), **trust.sha256, "pool": pool.keys,
        "check": check.keys if check is not None else None}))
    log.info("adapt: %d pool recordings, %s check recordings, up to %d rounds, runtime %s",
             len(pool), len(check) if check is not None else "no", a.rounds, runtime.describe())
    with tracking.start_run(STAGE, tags=trust.tags, resume_run_id=state.run_id,
                            started_at=started) as parent:
        state = state.with_run(parent.run_id)
        trust.log_datasets(parent, splits)
        parent.log_params({"adapt": dataclasses.asdict(a), "seed_detector": str(paths.detector),
                           "pool_recordings": len(pool),
                           "check_recordings": len(check) if check is not None else 0})
        inputs = AdaptInputs(paths, cfgs, runtime, plan, seed, pool, check, truth,
                             batch_budget(seed, rules, runtime), progress)
        domain = _field_domain(seed, pool, check)
        if state.next_round == 0:
            state = seed_round(inputs, state, parent)
        while not state.stop_reason and state.next_round <= a.rounds:
            state = adapt_round(inputs, state, parent)
        if not state.stop_reason:
            state = state.stopped(f"completed {a.rounds} round(s)")
        write_outputs(inputs, state, parent, domain)
    return 0


def _field_domain(seed: Detector, pool: FieldSet, check: FieldSet | None) -> dict[str, Any]:
    """The seed detector's domain check on the pool and the check set (one line each)."""
    out = {"pool": domain_summary(seed, pool)}
    if check is not None:
        out["check"] = domain_summary(seed, check)
    for name, summary in out.items():
        whole = summary["set"]
        log.info("adapt: %s recordings by the seed's domain check: %d in, %d shifted, %d "
                 "unknown; as a set: %s (rank test p = %s)", name, summary["in"],
                 summary["shifted"], summary["unknown"], whole["domain"],
                 "n/a" if whole["p_value"] is None else f"{whole['p_value']:.2g}")
    return out
