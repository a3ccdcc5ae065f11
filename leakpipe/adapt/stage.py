"""The adapt stage: field adaptation of the evaluated detector by rounds of pseudo-labelling.

``run_adapt`` is what `leakpipe adapt` (and stages/adapt.py) calls:

0. The seed detector (models/detector.pt) is re-scored on the labelled val split (its operating
   point re-chosen there, as evaluate chooses it), on the labelled field check set, and on the
   unlabelled pool, whose recordings get pseudo-labels (``leakpipe.adapt.pseudo``).
1. Each round fine-tunes the previous round's network with ``fit()`` on the labelled train
   split plus the pseudo-labelled pool segments (``leakpipe.adapt.rounds``), re-chooses the
   operating point on val and scores the labelled field check set: a round whose val file F1
   (with ``adapt.check_guard`` also its check-set file F1) falls more than
   ``adapt.tolerance`` below the seed detector's (round 0's, whichever round came before, so
   small losses cannot add up over rounds) is rejected, nothing of it is kept as the result,
   and adaptation stops with that reason. An accepted round's pool pseudo-labels feed the
   next round.
2. The newest accepted round becomes models/adapted.pt (network) and
   models/adapted_detector.pt (with its operating point), with metrics/adapt.json, the
   per-round table and figure, and one MLflow run with a child run per round (named
   ``adapt round 2 (accepted)``). With ``evaluate.registered_model`` set, the adapted detector
   becomes its own version of that registered model, tagged ``leakpipe.adapted``, described,
   with the alias ``adapted`` (never ``candidate``: it is not scored on the test split).

Every round is recorded in checkpoints/adapt (``leakpipe.adapt.state``), so a run killed
between rounds (or inside a round's ``fit()``) continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
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
    score_detector,
)
from leakpipe.adapt.pseudo import changed_labels, label_accuracy, label_counts, pseudo_labels
from leakpipe.adapt.report import (
    ROUND_COLUMNS,
    adapted_description,
    metrics_document,
    round_metrics,
    round_row,
    round_run_name,
    rounds_figure,
)
from leakpipe.adapt.rounds import (
    choose_on_val,
    fine_tune,
    rejection,
    set_figures,
    write_round_split,
)
from leakpipe.adapt.state import AdaptState, fingerprint
from leakpipe.config import (
    AdaptConfig,
    BuildConfig,
    DecisionConfig,
    EvaluateConfig,
    RuntimeConfig,
    TrainConfig,
    load_section,
)
from leakpipe.data.stamp import trust_splits
from leakpipe.detector import Detector, Network, load_detector, save_detector, save_network
from leakpipe.evaluate.detector_evaluation import batch_limits
from leakpipe.evaluate.registration import network_text, register_version
from leakpipe.files import file_sha256, write_csv_atomic, write_json_atomic
from leakpipe.predict import ScoringRules, batch_budget
from leakpipe.preload.plan import read_plan
from leakpipe.runtime import Runtime, make_runtime

log = logging.getLogger(__name__)

STAGE = "adapt"
SEED, ACCEPTED, REJECTED = "seed", "accepted", "rejected"


@dataclass(frozen=True)
class AdaptPaths:
    """Every path of the stage; dvc.yaml passes them on the command line."""

    detector: Path        # the seed detector (evaluate's)
    train: Path
    val: Path
    validated: Path | None   # the validation stamp; None: --unvalidated (tagged, warned)
    plan: Path
    work: Path            # round state and checkpoints (resume)
    network: Path         # out: the adapted network
    adapted: Path         # out: the adapted detector
    metrics: Path
    plots: Path           # per-round table (CSV)
    figure: Path          # per-round figure (PNG)


@dataclass(frozen=True)
class AdaptSections:
    adapt: AdaptConfig
    runtime: RuntimeConfig
    train: TrainConfig
    decision: DecisionConfig
    evaluate: EvaluateConfig
    build: BuildConfig

    @classmethod
    def load(cls, params: Path) -> AdaptSections:
        return cls(**{f.name: load_section(params, f.name) for f in dataclasses.fields(cls)})


@dataclass
class _Run:
    """What every round uses, resolved once."""

    paths: AdaptPaths
    cfgs: AdaptSections
    runtime: Runtime
    plan: dict[str, Any]
    seed: Detector
    pool: FieldSet
    check: FieldSet | None
    truth: dict[str, int] | None
    budget: int
    state: AdaptState
    parent: tracking.Tracker
    progress: bool
    domain: dict[str, Any]       # the field recordings' domain check (metrics/adapt.json)


def run_adapt(paths: AdaptPaths, cfgs: AdaptSections, *, progress: bool = True) -> int:
    """Adapt; 0 on success (a rejected round is a result, not a failure)."""
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
    with tracking.start_run(STAGE, tags=trust.tags, resume_run_id=state.run_id) as parent:
        state.run_id = parent.run_id
        state.save()
        trust.log_datasets(parent, splits)
        parent.log_params({"adapt": dataclasses.asdict(a), "seed_detector": str(paths.detector),
                           "pool_recordings": len(pool),
                           "check_recordings": len(check) if check is not None else 0})
        run = _Run(paths, cfgs, runtime, plan, seed, pool, check, truth,
                   batch_budget(seed, rules, runtime), state, parent, progress,
                   _field_domain(seed, pool, check))
        if state.next_round == 0:
            _seed_round(run)
        while not state.stop_reason and state.next_round <= a.rounds:
            _adapt_round(run, state.next_round)
        if not state.stop_reason:
            state.stop(f"completed {a.rounds} round(s)")
        _write_outputs(run)
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


def _seed_round(run: _Run) -> None:
    """Round 0: the seed detector as it stands, re-scored; its pseudo-labels feed round 1."""
    with tracking.start_run(STAGE, parent_run_id=run.parent.run_id,
                            tags={"leakpipe.adapt_round": "0"}) as child:
        child.set_tags({tracking.RUN_NAME_TAG: round_run_name(STAGE, 0)})
        _accept(run, 0, run.seed, SEED, child)


def _adapt_round(run: _Run, r: int) -> None:
    state, a = run.state, run.cfgs.adapt
    previous = state.accepted
    init = (run.paths.detector if previous["round"] == 0
            else state.round_dir(previous["round"]) / "network.pt")
    folder = state.round_dir(r)
    with tracking.start_run(STAGE, parent_run_id=run.parent.run_id,
                            tags={"leakpipe.adapt_round": str(r)}) as child:
        child.set_tags({tracking.RUN_NAME_TAG: round_run_name(STAGE, r)})
        child.log_params({"round": r, "init": str(init), "epochs": a.epochs,
                          "learning_rate": a.learning_rate})
        log.info("adapt round %d: fine-tune from %s", r, init)
        network = fine_tune(init, folder / "train.h5", run.paths.val, run.plan, run.seed,
                            run.cfgs.train, run.cfgs.decision, epochs=a.epochs,
                            learning_rate=a.learning_rate, runtime=run.runtime, tracker=child,
                            checkpoint_dir=folder / "checkpoints", progress=run.progress)
        choice = _choose(run, network)
        check = _check_figures(run, choice.detector)
        reason = rejection(r, state.seed, choice.figures["f1"],
                           check["f1"] if check is not None else None,
                           tolerance=a.tolerance, check_guard=a.check_guard,
                           standing=previous["round"])
        if reason:
            log.warning("adapt: %s", reason)
            entry = {"round": r, "status": REJECTED, "threshold": choice.point.threshold,
                     "val": choice.figures, "reason": reason}
            if check is not None:
                entry["check"] = check
            child.set_tags({"leakpipe.adapt_status": REJECTED,
                            tracking.RUN_NAME_TAG: round_run_name(STAGE, r, REJECTED)})
            child.log_metrics(round_metrics(entry))
            run.parent.log_metrics(round_metrics(entry), step=r)
            state.add(entry)
            state.stop(reason)
            return
        _accept(run, r, network, ACCEPTED, child, choice, check)


def _choose(run: _Run, network: Network) -> Any:
    c = run.cfgs
    return choose_on_val(network, run.paths.val, run.plan, c.decision, c.evaluate, run.runtime,
                         c.build.min_clip_fraction, domain=run.seed.domain,
                         quality=run.seed.quality)


def _check_figures(run: _Run, detector: Detector) -> dict[str, float] | None:
    """The labelled field check set's figures under ``detector`` (None without a check set)."""
    if run.check is None:
        return None
    assert run.check.truth is not None
    scores = score_detector(detector, run.check, run.runtime, run.budget)
    return set_figures(run.check.truth, scores.scores, detector.threshold)


def _accept(run: _Run, r: int, network: Network, status: str, child: tracking.Tracker,
            choice: Any = None, check: dict[str, float] | None = None) -> None:
    """Save round ``r``'s detector, score the check set and the pool, write the next round's
    split, record the round (its state entry last: a kill before it repeats the round)."""
    state, a = run.state, run.cfgs.adapt
    choice = choice or _choose(run, network)
    detector = choice.detector
    folder = state.round_dir(r)
    save_network(folder / "network.pt", detector)
    save_detector(folder / "detector.pt", detector)
    entry: dict[str, Any] = {"round": r, "status": status, "threshold": detector.threshold,
                             "val": choice.figures, "reason": ""}
    check = check if check is not None else _check_figures(run, detector)
    if check is not None:
        entry["check"] = check
    pool_scores = score_detector(detector, run.pool, run.runtime, run.budget)
    pseudo = pseudo_labels(pool_scores.scores, pool_scores.long_probs, detector.threshold,
                           margin=a.margin, fraction=a.keep_fraction)
    labels = {k: p.label for k, p in zip(run.pool.keys, pseudo, strict=True)}
    entry["pseudo"] = label_counts(pseudo)
    entry["labels"] = labels
    if r > 0:
        entry["changed"] = changed_labels(state.accepted["labels"], labels)
    if run.truth is not None:
        entry["pool"] = {"label_accuracy": label_accuracy(labels, run.truth)}
    if r < a.rounds and entry["pseudo"]["segments"]:
        split = write_round_split(state.round_dir(r + 1) / "train.h5", run.paths.train,
                                  run.pool, pool_scores, pseudo, detector,
                                  ratio=a.pseudo_per_labelled, seed=a.seed + r + 1)
        entry["split"] = dataclasses.asdict(split)
    child.set_tags({"leakpipe.adapt_status": status,
                    tracking.RUN_NAME_TAG: round_run_name(STAGE, r, status)})
    child.log_metrics(round_metrics(entry))
    run.parent.log_metrics(round_metrics(entry), step=r)
    _log_round(entry)
    state.add(entry)
    if r < a.rounds and not entry["pseudo"]["segments"]:
        state.stop(f"after round {r}: no pool recording is outside the margin "
                   f"{a.margin:g} of the threshold; nothing to learn from")


def _log_round(entry: dict[str, Any]) -> None:
    check = entry.get("check") or {}
    p = entry["pseudo"]
    log.info("adapt round %d (%s): val F1 %.3f @ %.2f | field check FPR %s sensitivity %s | "
             "pseudo-labels %d LEAK, %d not, %d within margin%s", entry["round"],
             entry["status"], entry["val"]["f1"], entry["threshold"],
             _fmt(check.get("fpr")), _fmt(check.get("recall")), p["leak"], p["not_leak"],
             p["within_margin"],
             f", {entry['changed']} changed" if entry.get("changed") is not None else "")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _write_outputs(run: _Run) -> None:
    paths, state = run.paths, run.state
    final = state.accepted
    detector = load_detector(state.round_dir(final["round"]) / "detector.pt")
    save_network(paths.network, detector)
    save_detector(paths.adapted, detector)
    rows = [round_row(e) for e in state.rounds]
    write_json_atomic(paths.metrics, {
        **metrics_document(state.rounds, final["round"], state.stop_reason),
        "domain": run.domain})
    write_csv_atomic(paths.plots, rows, ROUND_COLUMNS)
    figure = rounds_figure(rows)
    paths.figure.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(paths.figure, dpi=100)
    parent = run.parent
    parent.set_tags({"leakpipe.adapt_stop_reason": state.stop_reason[:250]})
    parent.log_metrics({f"final/{k}": v for k, v in round_metrics(final).items()})
    for path in (paths.metrics, paths.plots, paths.figure, paths.adapted):
        parent.log_artifact(path, STAGE)
    if run.cfgs.evaluate.registered_model:
        _register_adapted(run, run.cfgs.evaluate.registered_model)
    seed = state.rounds[0]
    log.info("adapt: %s; detector of round %d -> %s (field check FPR %s -> %s, sensitivity "
             "%s -> %s)", state.stop_reason, final["round"], paths.adapted,
             _fmt((seed.get("check") or {}).get("fpr")),
             _fmt((final.get("check") or {}).get("fpr")),
             _fmt((seed.get("check") or {}).get("recall")),
             _fmt((final.get("check") or {}).get("recall")))


def _register_adapted(run: _Run, name: str) -> None:
    """models/adapted_detector.pt as its own version of registered model ``name`` (evaluate's),
    tagged ``leakpipe.adapted``, with the alias ``adapted``: the same task, inputs and outputs
    as the evaluated versions, so one model; its own alias, because it was judged on val and
    the field check set, not on test (promote's ``candidate`` stays evaluate's). Once per adapt
    run: a rerun of a finished run, which changes nothing, registers nothing again. No round
    accepted: the adapted detector is the seed itself, so nothing is registered (an alias
    ``adapted`` on it would say it was adapted)."""
    parent = run.parent
    if run.state.accepted["round"] == 0:
        log.info("adapt: no round was accepted; nothing registered (the alias %s stays where "
                 "it was)", tracking.ALIAS_ADAPTED)
        return
    if parent.run_id is None or tracking.run_tag(parent.run_id,
                                                 tracking.TAG_REGISTERED_VERSION):
        return
    from leakpipe.serve.model import log_served_detector  # loads mlflow.pyfunc: only here

    uri = log_served_detector(run.paths.adapted)
    parent.set_tags({tracking.TAG_DETECTOR_URI: uri})
    state, seed_sha = run.state, file_sha256(run.paths.detector)
    description = adapted_description(state.rounds, state.accepted["round"], state.stop_reason,
                                      network=network_text(run.seed), seed_sha=seed_sha,
                                      pool=len(run.pool))
    register_version(parent, uri, name, alias=tracking.ALIAS_ADAPTED, tags={
        tracking.TAG_ADAPTED: "true", tracking.TAG_ADAPT_RUN: parent.run_id,
        tracking.TAG_SEED_SHA256: seed_sha}, description=description)
