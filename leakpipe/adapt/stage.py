"""The adapt stage: field adaptation of a detector of any kind by rounds of pseudo-labelling.

``run_adapt`` is what `leakpipe adapt` (and stages/adapt.py) calls:

0. The seed detector (by default models/detector.pt, evaluate's CNN; any kind's file, such as
   ship's models/shipped.pt) is re-scored on the labelled val split, on the labelled field check
   set, and on the unlabelled pool, whose recordings get pseudo-labels
   (``leakpipe.adapt.pseudo``).
1. Each round refits the standing round's detector as its kind refits (``leakpipe.adapt.adapter``:
   the CNN fine-tuned, the statistics refitted, a fused detector's both parts and its stacker)
   on the labelled train split plus the pseudo-labelled pool, re-chooses the operating point on
   val and scores the labelled field check set: a round whose val F1 (with
   ``adapt.check_guard`` also its check-set F1) falls more than ``adapt.tolerance`` below the
   seed detector's (round 0's, whichever round came before, so small losses cannot add up over
   rounds) is rejected, nothing of it is kept as the result, and adaptation stops with that
   reason. An accepted round's pool pseudo-labels feed the next round. The steps of a round,
   the same for every kind, are listed in ``leakpipe.adapt.steps``.
2. The newest accepted round becomes models/adapted_detector.pt (and, for a kind with a
   network, models/adapted.pt), with metrics/adapt.json, the per-round table and figure, and one
   MLflow run with a child run per round (named ``adapt round 2 (accepted)``); with
   ``evaluate.registered_model`` set, the adapted detector is registered with the alias
   ``adapted`` (``leakpipe.adapt.outputs``).

This module builds the kind's adapter once (the field recordings are read there, inside the
stage's MLflow run's time span) and runs the rounds. Every round is recorded in
checkpoints/adapt (``leakpipe.adapt.state``), so a run killed between rounds (or inside a
round's fit) continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from leakpipe import tracking
from leakpipe.adapt.adapter import AdaptContext, Adapter
from leakpipe.adapt.field import read_truth
from leakpipe.adapt.inputs import AdaptPaths, AdaptSections
from leakpipe.adapt.outputs import write_outputs
from leakpipe.adapt.record import STAGE
from leakpipe.adapt.state import AdaptState, fingerprint
from leakpipe.adapt.steps import adapt_round, seed_round
from leakpipe.data.stamp import trust_splits
from leakpipe.detectors.registry import kind_of, load_any_detector
from leakpipe.files import file_sha256
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
    seed = load_any_detector(paths.detector)
    kind = kind_of(seed)
    adapter: Adapter = kind.adapter(seed, AdaptContext(paths, cfgs, runtime, progress))
    truth = read_truth(Path(a.pool_truth)) if a.pool_truth else None
    state = AdaptState.open(paths.work, fingerprint({
        "params": {name: dataclasses.asdict(getattr(cfgs, name)) for name in adapter.sections},
        "detector": file_sha256(paths.detector), **trust.sha256, "pool": adapter.pool_keys,
        "check": adapter.check_keys}))
    log.info("adapt: a %s detector, %d pool recordings, %s check recordings, up to %d rounds, "
             "runtime %s", kind.name, len(adapter.pool_keys),
             len(adapter.check_keys) if adapter.check_keys is not None else "no", a.rounds,
             runtime.describe())
    with tracking.start_run(STAGE, tags=trust.tags, resume_run_id=state.run_id,
                            started_at=started) as parent:
        state = state.with_run(parent.run_id)
        trust.log_datasets(parent, splits)
        parent.log_params({"adapt": dataclasses.asdict(a), "seed_detector": str(paths.detector),
                           "seed_kind": kind.name, "pool_recordings": len(adapter.pool_keys),
                           "check_recordings": len(adapter.check_keys or ())})
        domain = _field_domain(adapter)
        if state.next_round == 0:
            state = seed_round(adapter, a, state, parent, truth)
        while not state.stop_reason and state.next_round <= a.rounds:
            state = adapt_round(adapter, a, state, parent, truth)
        if not state.stop_reason:
            state = state.stopped(f"completed {a.rounds} round(s)")
        write_outputs(adapter, kind.name, paths, cfgs, state, parent, domain)
    return 0


def _field_domain(adapter: Adapter) -> dict[str, Any]:
    """The seed detector's domain check on the pool and the check set (one line each)."""
    out = adapter.domain()
    for name, summary in out.items():
        whole = summary["set"]
        log.info("adapt: %s recordings by the seed's domain check: %d in, %d shifted, %d "
                 "unknown; as a set: %s (rank test p = %s)", name, summary["in"],
                 summary["shifted"], summary["unknown"], whole["domain"],
                 "n/a" if whole["p_value"] is None else f"{whole['p_value']:.2g}")
    return out
