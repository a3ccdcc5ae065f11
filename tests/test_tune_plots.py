"""The tuning study's figures: what they draw and what their titles say (not their pixels).

An in-memory Optuna study with the default space's width (13 parameters) and a handful of
complete trials, built without training anything: the figures take well under a second.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution

from leakpipe.tune import plots

N_PARAMS = 13
NAMES = [f"train.p{i:02d}" for i in range(N_PARAMS)]


def _study(n_trials: int) -> optuna.Study:
    """``n_trials`` complete trials whose objective follows p00 strongly and p01 weakly."""
    rng = np.random.default_rng(0)
    study = optuna.create_study(direction="maximize", storage=optuna.storages.InMemoryStorage())
    for _ in range(n_trials):
        params = {name: float(rng.uniform()) for name in NAMES}
        value = 2.0 * params["train.p00"] + 0.5 * params["train.p01"]
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions={n: FloatDistribution(0.0, 1.0) for n in NAMES},
            value=value))
    return study


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_the_parallel_plot_draws_only_the_most_important_params() -> None:
    figures = plots.draw_plots(_study(12))
    ranked = list(plots.param_importances(_study(12)))
    axes = figures[plots.PARALLEL].axes[0]
    labels = [t.get_text() for t in axes.get_xticklabels()]
    assert labels[0] == "Objective Value"              # then the top 4 (in Optuna's order)
    assert sorted(labels[1:]) == sorted(ranked[:plots.PARALLEL_MAX_PARAMS])
    assert axes.get_title() == (f"Parallel coordinates: the {plots.PARALLEL_MAX_PARAMS} most "
                                f"important of {N_PARAMS} parameters (n = 12 complete trials)")


def test_the_importance_title_gives_n_and_a_caveat_when_it_is_small() -> None:
    figures = plots.draw_plots(_study(3))
    title = figures[plots.IMPORTANCES].axes[0].get_title(loc="left")
    assert title.startswith("Hyperparameter importances (n = 3 complete trials)")
    assert "caution: 3 trials are too few to rank 13 parameters" in title
    assert plots.importance_title(40, N_PARAMS) == (
        "Hyperparameter importances (n = 40 complete trials)")           # enough: no caveat
    assert plots.few_trials(25, N_PARAMS) and not plots.few_trials(26, N_PARAMS)
    assert plots.few_trials(19, 2) and not plots.few_trials(20, 2)


def test_a_study_too_small_to_rank_gets_only_its_history(tmp_path: Path) -> None:
    study = _study(1)
    assert plots.param_importances(study) == {}
    assert [p.name for p in plots.save_plots(study, tmp_path)] == [plots.HISTORY]
    assert plots.parallel_params({"a": 0.1, "b": 0.7, "c": 0.2}, limit=2) == ["b", "c"]
