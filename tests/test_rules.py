"""The logger's rules (min_level, band_min_level): nothing fitted but the threshold (and, for
band_min_level, the band on train), the orientation fixed by the physics; grouped CV runs
them as methods whose choices never read the test fold. Real recording statistics of
generated recordings (build's ``recording_stats``) and real settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from leakpipe.baselines.logger_stats import RecordingTable
from leakpipe.baselines.rules import (
    BAND_MIN_LEVEL,
    MIN_LEVEL,
    fit_rule,
    to_unit,
)
from leakpipe.config import load_section
from leakpipe.errors import DataError
from leakpipe.evaluate.figures import ranking_metrics
from leakpipe.features.recording_stats import recording_stats, stat_names
from tests.conftest import PARAMS
from tests.test_ship import RATE, SPEC, _recording

EV = load_section(PARAMS, "evaluate")
DECISION = load_section(PARAMS, "decision")


def _table(seed: int, n_sites: int = 6, per_site: int = 2, name: str = "t") -> RecordingTable:
    """Recordings of ``n_sites`` sites, every other site a leak (hiss all the time) or quiet
    with bursts of traffic: the quiet moments tell them apart."""
    rng = np.random.default_rng(seed)
    truth = np.repeat(np.arange(n_sites) % 2 == 1, per_site)
    stats = np.stack([recording_stats(_recording(rng, bool(t)), RATE, SPEC) for t in truth])
    ids = np.array([f"{name}/{i}" for i in range(len(truth))])
    return RecordingTable(path=Path(f"{name}.h5"), recording_id=ids,
                          group=np.repeat([f"{name}-s{s}" for s in range(n_sites)], per_site),
                          truth=truth, stats=stats.astype(np.float32),
                          names=tuple(stat_names(SPEC)), clip_recording=np.arange(len(truth)))


def test_the_map_to_unit_is_strictly_increasing_and_a_missing_level_is_no_evidence() -> None:
    x = np.array([-90.0, -60.0, -59.999, -30.0, np.nan])
    y = to_unit(x, -60.0, 5.0)
    assert np.all(np.diff(y[:4]) > 0) and y[4] == 0.5 and 0 < y.min() and y.max() < 1


def test_min_level_reads_the_quietest_level_and_ranks_as_the_level_does() -> None:
    train, val, test = _table(0, name="a"), _table(1, name="b"), _table(2, name="c")
    fit = fit_rule(MIN_LEVEL, train, val, 10.0, EV, DECISION)
    assert fit.statistic == "level_p10" and not fit.band_from_train
    level = fit.levels(test)
    assert np.array_equal(level, test.stats[:, list(test.names).index("level_p10")])
    assert ranking_metrics(test.truth, fit.scores(test))["roc_auc"] == pytest.approx(
        ranking_metrics(test.truth, level)["roc_auc"], abs=1e-12)
    # a leak fills the quiet moments: the rule separates these recordings
    assert ranking_metrics(test.truth, level)["roc_auc"] > 0.9
    assert 0.02 <= fit.point.threshold <= 0.98


def test_band_min_level_takes_its_band_from_train_only() -> None:
    train, val = _table(0, name="a"), _table(1, name="b")
    fit = fit_rule(BAND_MIN_LEVEL, train, val, 10.0, EV, DECISION)
    assert fit.statistic in ("band250_p10", "band1000_p10") and fit.band_from_train
    flipped_val = dataclasses.replace(val, truth=~val.truth)
    assert fit_rule(BAND_MIN_LEVEL, train, flipped_val, 10.0, EV,
                    DECISION).statistic == fit.statistic      # val's labels: the threshold only
    # the band is the one whose level ranks train best
    aucs = {n: ranking_metrics(train.truth, train.stats[:, list(train.names).index(n)])
            ["roc_auc"] for n in ("band250_p10", "band1000_p10")}
    assert aucs[fit.statistic] == max(aucs.values())


def test_a_percentile_build_did_not_compute_is_one_error_naming_both_keys() -> None:
    train, val = _table(0, name="a"), _table(1, name="b")
    for rule in (MIN_LEVEL, BAND_MIN_LEVEL):
        with pytest.raises(DataError, match=r"baselines.rules.percentile 3: .*build.stats."
                                            "percentiles"):
            fit_rule(rule, train, val, 3.0, EV, DECISION)


def test_in_cv_the_test_folds_labels_change_nothing_a_rule_chooses() -> None:
    from leakpipe.cv.methods import run_rules

    tables = {"train": _table(0, name="a"), "val": _table(1, name="b"),
              "test": _table(2, name="c")}
    settings = dataclasses.replace(_settings(), baselines=dataclasses.replace(
        _settings().baselines, rules=dataclasses.replace(_settings().baselines.rules,
                                                         percentile=10.0)))
    results = run_rules(tables, settings, (MIN_LEVEL, BAND_MIN_LEVEL))
    flipped = {**tables, "test": dataclasses.replace(tables["test"],
                                                     truth=~tables["test"].truth)}
    again = run_rules(flipped, settings, (MIN_LEVEL, BAND_MIN_LEVEL))
    for a, b in zip(results, again, strict=True):
        assert a.name == b.name and a.threshold == b.threshold and a.info == b.info
        assert np.array_equal(a.scores, b.scores) and np.array_equal(a.decision, b.decision)
        assert a.recording["val_roc_auc"] == b.recording["val_roc_auc"]
    assert results[0].info["statistic"] == "level_p10"


def _settings():  # noqa: ANN202 (cv.methods.Settings)
    from leakpipe.cv.methods import Settings

    sections = {name: load_section(PARAMS, name) for name in
                ("model", "train", "runtime", "decision", "evaluate", "baselines", "detector",
                 "preload")}
    return Settings(cv=load_section(PARAMS, "cv"), plan={}, **sections)
