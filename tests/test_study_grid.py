"""The segmentation grid's pure parts: which cells exist, the params they set, the table."""

from __future__ import annotations

import dataclasses
import math

import pytest

from leakpipe.config import FeatureConfig
from leakpipe.study.figures import heatmap_figure, heatmap_records
from leakpipe.study.grid import (
    FULL_LONG_S,
    FULL_SHORT,
    STATUS_DONE,
    STATUS_FAILED,
    STATUS_INVALID,
    Cell,
    best_cell,
    metric_value,
    plan_grid,
    table_rows,
)
from tests.conftest import PARAMS


@pytest.fixture(scope="module")
def features() -> FeatureConfig:
    from leakpipe.config import load_section

    return load_section(PARAMS, "build").features


def test_every_cell_of_the_full_grid_exists_at_8192_hz(features: FeatureConfig) -> None:
    plan = plan_grid(FULL_LONG_S, FULL_SHORT, features)
    assert len(plan.cells) == 25 and not plan.invalid
    assert len({c.name for c in plan.cells}) == 25          # one experiment name per cell


def test_at_8_khz_the_paper_has_24_valid_cells(features: FeatureConfig) -> None:
    """0.125 s is 1000 samples at 8 kHz: a 1024-sample short window cannot fit (paper: 24)."""
    plan = plan_grid(FULL_LONG_S, FULL_SHORT,
                     dataclasses.replace(features, sample_rate=8000, fmax=4000.0))
    assert list(plan.invalid) == [Cell(0.125, 1024)]
    assert "longer than the long window 1000 samples" in plan.invalid[Cell(0.125, 1024)]
    assert len(plan.valid) == 24


def test_cell_params_follow_the_documented_rules(features: FeatureConfig) -> None:
    for cell in plan_grid(FULL_LONG_S, FULL_SHORT, features).valid:
        sets = cell.overrides()
        assert sets["build.long_hop_s"] == cell.long_window_s / 2
        assert sets["build.short_hop"] == cell.short_window // 2
        assert sets["build.n_fft"] == sets["build.hop_length"] == cell.short_window
        changed = dataclasses.replace(
            features, **{k.split(".", 1)[1]: v for k, v in sets.items()})
        assert not changed.problems() and changed.n_frames == 1
    default = Cell(0.25, 512).overrides()
    assert (default["build.long_hop_s"], default["build.short_hop"]) == (
        features.long_hop_s, features.short_hop)              # the default is a cell
    assert Cell(0.125, 64).name == "grid-l125ms-s64"
    assert Cell(0.0625, 64).name == "grid-l62p5ms-s64"


def test_bad_grids_are_refused(features: FeatureConfig) -> None:
    with pytest.raises(ValueError, match="at least one"):
        plan_grid([], [64], features)
    with pytest.raises(ValueError, match="repeats"):
        plan_grid([0.25, 0.25], [64], features)
    plan = plan_grid([4.0], [64], features)                   # longer than a 3 s clip
    assert "must not exceed clip_s" in plan.invalid[Cell(4.0, 64)]


def test_table_marks_each_cell_done_failed_or_invalid(features: FeatureConfig) -> None:
    at_8k = dataclasses.replace(features, sample_rate=8000, fmax=4000.0)
    plan = plan_grid([0.125, 0.25], [512, 1024], at_8k)
    results = {Cell(0.125, 512): {"status": STATUS_DONE,
                                  "metrics": {"test": {"clip_f1": 0.7, "clip_accuracy": 0.8}}},
               Cell(0.25, 512): {"status": STATUS_DONE,
                                 "metrics": {"test": {"clip_f1": 0.9}}}}
    rows = table_rows(plan, results, ["test.clip_f1", "test/clip_accuracy"])
    by_cell = {(r["long_window_s"], r["short_window"]): r for r in rows}
    assert [r["status"] for r in rows] == [STATUS_DONE, STATUS_INVALID, STATUS_DONE,
                                           STATUS_FAILED]
    assert by_cell[(0.125, 1024)]["experiment"] == "" and by_cell[(0.125, 1024)]["note"]
    assert by_cell[(0.125, 512)]["test/clip_accuracy"] == 0.8
    assert math.isnan(by_cell[(0.25, 512)]["test/clip_accuracy"])   # absent: NaN, not 0
    assert best_cell(rows, "test.clip_f1")["short_window"] == 512
    assert best_cell(rows, "test.clip_f1")["long_window_s"] == 0.25
    records = heatmap_records(rows, "test.clip_f1")
    assert [(r["long_window_s"], r["short_window"]) for r in records] == [(0.125, 512),
                                                                        (0.25, 512)]
    figure = heatmap_figure(rows, "test.clip_f1", "t")
    texts = sorted(t.get_text() for t in figure.axes[0].texts)
    assert texts == ["0.700", "0.900", "failed", "n/a"]


def test_best_cell_on_a_tie_is_the_first_in_grid_order() -> None:
    rows = [{"status": STATUS_DONE, "m": 0.5, "experiment": "a"},
            {"status": STATUS_DONE, "m": 0.5, "experiment": "b"},
            {"status": STATUS_FAILED, "m": math.nan, "experiment": "c"}]
    assert best_cell(rows, "m")["experiment"] == "a"
    assert best_cell(rows[2:], "m") is None


def test_metric_value_reads_nested_keys() -> None:
    assert metric_value({"test": {"clip_f1": 1}}, "test/clip_f1") == 1.0
    assert math.isnan(metric_value({"test": {"clip_f1": "x"}}, "test.clip_f1"))
    assert math.isnan(metric_value({}, "test.clip_f1"))
