"""One trial: sample a variant, train it with the train stage's ``fit()``, report every epoch.

There is no second training loop: a trial opens the splits the way `train` does
(``prepare_training`` from the preload plan) and calls ``fit()`` with an ``on_epoch`` callback
that reports the objective to Optuna and raises ``TrialPruned`` when the pruner says so. Each
epoch sees ``tune.train_fraction`` of the (reshuffled) training batches. A trial is one MLflow
child run of the study's parent run: its values, per-epoch metrics, state and pruned-at step.
The run says how the trial ended where a person looks first: its name (``trial-007 (pruned)``,
``trial-003 (failed)``), its status (a pruned trial's run is KILLED, a failed one's FAILED)
and its description (pruned at which step and why; the error's one line).
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from leakpipe import tracking
from leakpipe.config import DecisionConfig, ModelConfig, RuntimeConfig, TrainConfig, TuneConfig
from leakpipe.errors import LeakpipeError
from leakpipe.runtime import make_runtime
from leakpipe.train.fit import fit
from leakpipe.train.inputs import prepare_training
from leakpipe.train.losses import NonFiniteLossError
from leakpipe.train.subsample import Subsample
from leakpipe.tune.names import (
    ATTR_RUN_ID,
    ATTR_VALUES,
    TAG_PRUNED_AT,
    TAG_REASON,
    TAG_STATE,
    TAG_STUDY,
    TAG_TRIAL,
    VALUE_METRIC,
)
from leakpipe.tune.space import Variant, base_values, make_variant, suggest
from leakpipe.tune.study import resolve_direction

log = logging.getLogger(__name__)

# Errors that fail one trial and let the study go on (torch.OutOfMemoryError is a RuntimeError;
# NonFiniteLossError a LeakpipeError). Anything else is recorded FAIL and stops the worker.
TRIAL_ERRORS: tuple[type[BaseException], ...] = (LeakpipeError, RuntimeError, ValueError,
                                                 ArithmeticError, MemoryError)
TRIAL_STAGE = "tune-trial"
TRIAL_DIGITS = 3          # trial-007: the runs table sorts trial names in number order


@dataclass(frozen=True)
class TrialInputs:
    """What every trial of a study reads: the splits, the plan, the base configs."""

    train_path: Path
    val_path: Path
    plan: dict[str, Any]
    model: ModelConfig
    train: TrainConfig
    tune: TuneConfig
    study_name: str
    runtime: RuntimeConfig
    decision: DecisionConfig
    parent_run_id: str | None = None  # MLflow parent run; None = no MLflow (tests)


@dataclass(frozen=True)
class Outcome:
    """How a trial ended without an error: COMPLETE with a value, or PRUNED."""

    state: TrialState
    value: float | None
    epochs: int
    pruned_at: int | None = None
    reason: str = ""

    def tags(self) -> dict[str, str]:
        tags = {TAG_STATE: self.state.name}
        if self.pruned_at is not None:
            tags[TAG_PRUNED_AT] = str(self.pruned_at)
        if self.reason:
            tags[TAG_REASON] = self.reason
        return tags


class EpochReporter:
    """``fit``'s ``on_epoch``: report the objective, raise ``TrialPruned`` when told to.

    After the last epoch there is nothing left to save: the trial completes with its value.
    """

    def __init__(self, trial: optuna.Trial, objective: str, direction: str,
                 epochs: int) -> None:
        self.trial, self.objective, self.direction = trial, objective, direction
        self.epochs = epochs
        self.values: list[float] = []
        self.last_step: int | None = None

    def __call__(self, epoch: int, metrics: dict[str, float]) -> None:
        value = float(metrics[self.objective])
        self.values.append(value)
        self.last_step = epoch
        if math.isfinite(value):
            self.trial.report(value, step=epoch)
        if epoch + 1 < self.epochs and self.trial.should_prune():
            raise optuna.TrialPruned(f"pruned after epoch {epoch + 1}: "
                                     f"{self.objective} = {value:.4f}")

    def best(self) -> float:
        finite = [v for v in self.values if math.isfinite(v)]
        if not finite:
            raise FloatingPointError(f"{self.objective} was not finite in any epoch: "
                                     f"{self.values}")
        return max(finite) if self.direction == "maximize" else min(finite)

    def outcome(self, state: TrialState, reason: str = "") -> Outcome:
        value = self.best() if state == TrialState.COMPLETE else None
        pruned_at = self.last_step if state == TrialState.PRUNED else None
        return Outcome(state, value, len(self.values), pruned_at, reason)


def run_trial(trial: optuna.Trial, inputs: TrialInputs) -> Outcome:
    """Sample, train and judge one trial; ``TRIAL_ERRORS`` propagate (the caller fails it)."""
    chosen = suggest(trial, inputs.tune, base_values(inputs.model, inputs.train))
    with _child_run(trial, inputs) as run:
        try:
            variant = make_variant(inputs.model, inputs.train, inputs.tune, chosen,
                                   source=f"trial {trial.number}")
            trial.set_user_attr(ATTR_VALUES, variant.values)
            run.log_params({**variant.values, "tune.epochs": inputs.tune.epochs,
                            "tune.train_fraction": inputs.tune.train_fraction})
            outcome = train_variant(trial, inputs, variant, run)
        except TRIAL_ERRORS as exc:
            run.set_tags({TAG_STATE: TrialState.FAIL.name, TAG_REASON: failure_reason(exc),
                          tracking.RUN_NAME_TAG: trial_run_name(trial.number, TrialState.FAIL)})
            raise                               # the run ends FAILED, saying why
        _record_outcome(run, trial.number, outcome)
    return outcome


def _record_outcome(run: tracking.Tracker, number: int, outcome: Outcome) -> None:
    """How the trial ended, on its run: tags, name, value; a pruned one ends KILLED."""
    run.set_tags({**outcome.tags(), tracking.RUN_NAME_TAG: trial_run_name(number,
                                                                           outcome.state)})
    if outcome.value is not None:
        run.log_metrics({VALUE_METRIC: outcome.value})
    if outcome.state == TrialState.PRUNED:
        where = "" if outcome.pruned_at is None else f" at step {outcome.pruned_at}"
        run.add_note(f"Pruned{where}: {outcome.reason}")
        run.end_as("KILLED")


def trial_run_name(number: int, state: TrialState | None = None) -> str:
    """``trial-007``, with how it ended when it did not complete: ``trial-007 (pruned)``."""
    name = f"trial-{number:0{TRIAL_DIGITS}d}"
    if state in (TrialState.PRUNED, TrialState.FAIL):
        name += f" ({'pruned' if state == TrialState.PRUNED else 'failed'})"
    return name


def train_variant(trial: optuna.Trial, inputs: TrialInputs, variant: Variant,
                  run: tracking.Tracker) -> Outcome:
    """``fit()`` on the trial's configs; pruning and (by policy) a NaN loss end it PRUNED."""
    cfg = inputs.tune
    reporter = EpochReporter(trial, cfg.objective, resolve_direction(cfg), cfg.epochs)
    rt = inputs.runtime
    runtime = make_runtime(rt.device, rt.amp, rt.channels_last)
    data = prepare_training(inputs.train_path, inputs.val_path, inputs.plan, variant.train,
                            runtime.device)
    try:
        with tempfile.TemporaryDirectory(prefix=f"leakpipe-trial{trial.number}-") as ckpt:
            fit(variant.model, variant.train, runtime=runtime, decision=inputs.decision,
                train_source=Subsample(data.train_source, cfg.train_fraction),
                val=data.val, class_counts=data.class_counts, tracker=run,
                checkpoint_dir=Path(ckpt), features=data.features.to_dict(),
                on_epoch=reporter)
    except optuna.TrialPruned as exc:
        return reporter.outcome(TrialState.PRUNED, str(exc))
    except NonFiniteLossError as exc:
        if cfg.nan_loss != "prune":
            raise
        return reporter.outcome(TrialState.PRUNED, f"non-finite loss: {exc}")
    finally:
        data.close()
    return reporter.outcome(TrialState.COMPLETE)


def failure_reason(exc: BaseException) -> str:
    """One line: the exception type and the first line of its message."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


@contextlib.contextmanager
def _child_run(trial: optuna.Trial, inputs: TrialInputs) -> Iterator[tracking.Tracker]:
    """The trial's MLflow run under the study's parent run (nothing without a parent)."""
    if inputs.parent_run_id is None:
        yield tracking.NullTracker()
        return
    tags = {TAG_STUDY: inputs.study_name, TAG_TRIAL: str(trial.number)}
    with tracking.start_run(TRIAL_STAGE, tags=tags, parent_run_id=inputs.parent_run_id) as run:
        run.set_tags({tracking.RUN_NAME_TAG: trial_run_name(trial.number)})
        trial.set_user_attr(ATTR_RUN_ID, run.run_id)
        yield run
