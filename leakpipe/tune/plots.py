"""Study plots for the MLflow parent run: optimisation history, parallel coordinates, importances.

Optuna's matplotlib backend (plotly is not a dependency). A plot that the study cannot make yet
(e.g. importances from fewer than two complete trials) is skipped with one INFO line.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning

from leakpipe import tracking

log = logging.getLogger(__name__)

ARTIFACT_DIR = "tuning"
DPI = 120


def _plotters() -> dict[str, Callable[[optuna.Study], Any]]:
    from optuna.visualization import matplotlib as vis

    return {"optimization_history.png": vis.plot_optimization_history,
            "parallel_coordinate.png": vis.plot_parallel_coordinate,
            "param_importances.png": vis.plot_param_importances}


def save_plots(study: optuna.Study, folder: Path) -> list[Path]:
    """Write every plot the study can make into ``folder``; returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for name, plot in _plotters().items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                warnings.simplefilter("ignore", UserWarning)  # degenerate axes of tiny studies
                axes = plot(study)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            log.info("no %s: %s", name, exc)
            continue
        figure = getattr(axes, "figure", None) or axes.flat[0].figure  # Axes or array of Axes
        figure.savefig(folder / name, dpi=DPI, bbox_inches="tight")
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
