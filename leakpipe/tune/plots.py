"""Study plots for the MLflow parent run: optimisation history, parallel coordinates, importances.

Optuna's matplotlib backend (plotly is not a dependency). A plot that the study cannot make yet
(e.g. importances from fewer than two complete trials) is skipped with one INFO line.

The default space has a dozen parameters: a parallel-coordinates plot of all of them is a row of
overlapping labels, so it draws only the ``PARALLEL_MAX_PARAMS`` most important ones (by the
same importances the importance plot shows) and says so in its title. Both titles give the
number of complete trials the figures rest on, and the importance plot warns when that number
is small for the number of parameters ranked: three trials rank nothing reliably.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.trial import TrialState

from leakpipe import tracking

log = logging.getLogger(__name__)

ARTIFACT_DIR = "tuning"
DPI = 120
HISTORY, PARALLEL, IMPORTANCES = ("optimization_history.png", "parallel_coordinate.png",
                                  "param_importances.png")
PARALLEL_MAX_PARAMS = 4     # parameter axes of the parallel-coordinates plot (+ the objective)
TRIALS_PER_PARAM = 2        # fewer complete trials than this per parameter: a rough ranking
MIN_TRIALS_FOR_RANKING = 20  # ... and never trusted below this many, however few parameters
MIN_TRIALS_TO_RANK = 2      # complete trials before importances (and their plots) are drawn
PLOT_ERRORS = (ValueError, RuntimeError, ZeroDivisionError)


def complete_trials(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def param_importances(study: optuna.Study) -> dict[str, float]:
    """Optuna's default importances (PED-ANOVA: deterministic), most important first; {} when
    the study cannot rank its parameters yet: fewer than ``MIN_TRIALS_TO_RANK`` complete
    trials (PED-ANOVA gives one trial's parameters equal shares rather than an error)."""
    if complete_trials(study) < MIN_TRIALS_TO_RANK:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            warnings.simplefilter("ignore", UserWarning)
            return dict(optuna.importance.get_param_importances(study))
    except PLOT_ERRORS as exc:
        log.info("no parameter importances: %s", exc)
        return {}


def parallel_params(importances: Mapping[str, float],
                    limit: int = PARALLEL_MAX_PARAMS) -> list[str]:
    """The parameters the parallel-coordinates plot draws: the ``limit`` most important."""
    ranked = sorted(importances, key=lambda name: -importances[name])
    return ranked[:limit]


def few_trials(n_complete: int, n_params: int) -> bool:
    """Whether ``n_complete`` trials are too few to rank ``n_params`` parameters (a rule of
    thumb: at least ``TRIALS_PER_PARAM`` per parameter and ``MIN_TRIALS_FOR_RANKING``)."""
    return n_complete < max(MIN_TRIALS_FOR_RANKING, TRIALS_PER_PARAM * n_params)


def importance_title(n_complete: int, n_params: int) -> str:
    title = f"Hyperparameter importances (n = {n_complete} complete trials)"
    if few_trials(n_complete, n_params):
        title += (f"\ncaution: {n_complete} trials are too few to rank {n_params} parameters; "
                  "a rough hint, not a finding")
    return title


def parallel_title(drawn: int, n_params: int, n_complete: int) -> str:
    which = (f"the {drawn} most important of {n_params} parameters" if drawn < n_params
             else f"all {n_params} parameters")
    return f"Parallel coordinates: {which} (n = {n_complete} complete trials)"


def draw_plots(study: optuna.Study) -> dict[str, Any]:
    """Every figure the study can make, by file name (matplotlib Figures, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    from optuna.visualization import matplotlib as vis

    n_complete = complete_trials(study)
    importances = param_importances(study)
    figures: dict[str, Any] = {}
    history = _plot(HISTORY, vis.plot_optimization_history, study)
    if history is not None:
        figures[HISTORY] = history.figure
    if not importances:
        log.info("no %s / %s: the importances that pick the axes need two complete trials",
                 PARALLEL, IMPORTANCES)
        return figures
    drawn = parallel_params(importances)
    parallel = _plot(PARALLEL, vis.plot_parallel_coordinate, study, params=drawn)
    if parallel is not None:
        parallel.set_title(parallel_title(len(drawn), len(importances), n_complete), y=1.03)
        figures[PARALLEL] = parallel.figure
    ranked = _plot(IMPORTANCES, vis.plot_param_importances, study)
    if ranked is not None:
        ranked.set_title(importance_title(n_complete, len(importances)), loc="left")
        figures[IMPORTANCES] = ranked.figure
    return figures


def _plot(name: str, plot: Any, study: optuna.Study, **kwargs: Any) -> Any:
    """The plot's Axes, or None (one INFO line) when the study cannot make it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            warnings.simplefilter("ignore", UserWarning)  # degenerate axes of tiny studies
            axes = plot(study, **kwargs)
    except PLOT_ERRORS as exc:
        log.info("no %s: %s", name, exc)
        return None
    return axes if hasattr(axes, "figure") else axes.flat[0]     # Axes or array of Axes


def save_plots(study: optuna.Study, folder: Path) -> list[Path]:
    """Write every plot the study can make into ``folder``; returns the files."""
    import matplotlib.pyplot as plt

    written = []
    for name, figure in draw_plots(study).items():
        try:
            figure.savefig(folder / name, dpi=DPI, bbox_inches="tight")
        finally:
            plt.close(figure)
        written.append(folder / name)
    return written


def log_plots(study: optuna.Study, run: tracking.Tracker) -> list[str]:
    """The plots as artifacts of the study's parent run; returns their names."""
    with tracking.scratch_dir() as folder:
        files = save_plots(study, folder)
        for path in files:
            run.log_artifact(path, ARTIFACT_DIR)
    return [p.name for p in files]
