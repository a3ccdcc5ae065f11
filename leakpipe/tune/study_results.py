"""What a study produced: trial counts, the best trial, tuning/best_params.yaml, metrics/tune.json.

The metrics dict (``tune/best_value``, ``tune/trials_complete``, ...) feeds both the DVC metrics
file and the MLflow parent run. best_params.yaml holds only what the trials measured (no
timestamps, no paths), so the same study always writes the same file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from leakpipe.files import write_json_atomic, write_text_atomic
from leakpipe.tune.apply import PARAMS_KEY, exp_run_line
from leakpipe.tune.names import ATTR_REASON, ATTR_VALUES
from leakpipe.tune.space import by_section
from leakpipe.tune.study import TuneError
from leakpipe.tune.trial_budget import superseded


@dataclass(frozen=True)
class StudySummary:
    """Counts by state and the best trial of a study."""

    study_name: str
    objective: str
    direction: str
    counts: dict[str, int]            # state name -> trials, every trial of the study
    retried: int                      # trials replaced by a retry (their worker died)
    best_trial: int | None
    best_value: float | None
    best_values: dict[str, dict[str, Any]] = field(default_factory=dict)  # section -> key -> v
    study_seconds: float = 0.0
    first_failure: str = ""

    def count(self, state: TrialState) -> int:
        return self.counts.get(state.name, 0)


def best_trial(study: optuna.Study, trials: list[FrozenTrial]) -> FrozenTrial | None:
    """The best COMPLETE trial with a finite value (the lowest number among ties)."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None
            and math.isfinite(t.value)]
    if not done:
        return None
    sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
    return min(done, key=lambda t: (sign * t.value, t.number))


def summarize(study: optuna.Study, objective: str) -> StudySummary:
    trials = study.get_trials(deepcopy=False)
    best = best_trial(study, trials)
    counts = {state.name: sum(t.state == state for t in trials) for state in TrialState}
    failures = [t for t in trials if t.state == TrialState.FAIL]
    first = (f"trial {failures[0].number}: {failures[0].user_attrs.get(ATTR_REASON, '?')}"
             if failures else "")
    return StudySummary(
        study_name=study.study_name, objective=objective,
        direction=study.direction.name.lower(), counts={k: v for k, v in counts.items() if v},
        retried=len(superseded(trials)), best_trial=None if best is None else best.number,
        best_value=None if best is None else float(best.value),
        best_values=by_section(best.user_attrs.get(ATTR_VALUES, {})) if best else {},
        study_seconds=_span_seconds(trials), first_failure=first)


def _span_seconds(trials: list[FrozenTrial]) -> float:
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0


def require_complete(summary: StudySummary) -> None:
    """A study without a single COMPLETE trial fails the stage, saying why."""
    if summary.best_trial is not None:
        return
    counts = ", ".join(f"{n} {state}" for state, n in sorted(summary.counts.items())) or "none"
    hint = f"; first failure: {summary.first_failure}" if summary.first_failure else ""
    raise TuneError(f"study {summary.study_name}: no trial completed (trials: {counts}){hint}; "
                    "fix the cause, or widen the budget / loosen the pruner, and re-run")


def metrics(summary: StudySummary, run_seconds: float) -> dict[str, float]:
    """``tune/*`` metrics: the same dict goes to metrics/tune.json and the MLflow parent run."""
    states = {state: summary.count(state) for state in TrialState}
    return {
        "tune/best_value": float(summary.best_value) if summary.best_value is not None
        else float("nan"),
        "tune/best_trial": float(summary.best_trial if summary.best_trial is not None else -1),
        **{f"tune/trials_{state.name.lower()}": float(n) for state, n in states.items()},
        "tune/trials_retried": float(summary.retried),
        "tune/trials_total": float(sum(states.values())),
        "tune/study_seconds": summary.study_seconds,
        "tune/run_seconds": run_seconds,
    }


def best_params_document(summary: StudySummary, trial_epochs: int) -> dict[str, Any]:
    return {"study": summary.study_name, "objective": summary.objective,
            "direction": summary.direction, "value": summary.best_value,
            "trial": summary.best_trial, "trial_epochs": trial_epochs,
            PARAMS_KEY: summary.best_values}


def write_best_params(path: Path, summary: StudySummary, trial_epochs: int) -> None:
    """tuning/best_params.yaml, written to a sibling and renamed into place."""
    header = ("# Best trial of the Optuna study (leakpipe tune). Nothing changes params.yaml\n"
              "# until you run `leakpipe tune apply`, or the equivalent experiment:\n"
              f"#   {exp_run_line(summary.best_values)}\n")
    body = yaml.safe_dump(best_params_document(summary, trial_epochs), sort_keys=False)
    write_text_atomic(path, header + body)


def write_metrics(path: Path, values: dict[str, float]) -> None:
    """metrics/tune.json (DVC metrics), written to a sibling and renamed into place."""
    write_json_atomic(path, values)
