"""Pseudo-labels and segment selection of `leakpipe adapt` on hand-made probability tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leakpipe.adapt.guard import rejection
from leakpipe.adapt.pseudo import (
    LEAK,
    NOT_LEAK,
    changed_labels,
    keep_count,
    label_accuracy,
    label_counts,
    pack_rows,
    pseudo_label,
    pseudo_labels,
    select_segments,
)
from leakpipe.adapt.report import metrics_document, round_metrics, round_row
from leakpipe.config import AdaptConfig, from_mapping
from leakpipe.errors import ConfigError


def test_leak_recordings_keep_their_highest_segments_others_their_lowest() -> None:
    probs = np.array([0.2, 0.9, 0.4, 0.8, 0.1, 0.6])
    assert select_segments(probs, LEAK, 0.5).tolist() == [1, 3, 5]
    assert select_segments(probs, NOT_LEAK, 0.5).tolist() == [0, 2, 4]


def test_exactly_half_of_an_even_count_and_the_ceiling_of_an_odd_one() -> None:
    assert keep_count(4, 0.5) == 2
    assert keep_count(5, 0.5) == 3
    assert keep_count(10, 0.3) == 3          # 0.3 * 10 = 3.0000000000000004 in floats
    assert keep_count(7, 1.0) == 7
    assert keep_count(3, 0.01) == 1          # at least one segment of a labelled recording
    assert keep_count(0, 0.5) == 0
    probs = np.array([0.7, 0.3, 0.9, 0.1])
    assert select_segments(probs, LEAK, 0.5).tolist() == [0, 2]


def test_ties_keep_the_earlier_segment() -> None:
    probs = np.array([0.5, 0.9, 0.5, 0.5, 0.1])
    # LEAK keeps 3 of 5: 0.9 and then the first two of the three tied 0.5s
    assert select_segments(probs, LEAK, 0.5).tolist() == [0, 1, 2]
    # not LEAK keeps 0.1 and then the first two 0.5s
    assert select_segments(probs, NOT_LEAK, 0.5).tolist() == [0, 2, 4]
    flat = np.full(6, 0.42)
    assert select_segments(flat, LEAK, 0.5).tolist() == [0, 1, 2]
    assert select_segments(flat, NOT_LEAK, 0.5).tolist() == [0, 1, 2]


def test_recordings_within_the_margin_are_not_pseudo_labelled() -> None:
    assert pseudo_label(0.54, 0.5, 0.05) is None      # 0.04 above: within
    assert pseudo_label(0.46, 0.5, 0.05) is None      # 0.04 below: within
    assert pseudo_label(0.56, 0.5, 0.05) == LEAK
    assert pseudo_label(0.44, 0.5, 0.05) == NOT_LEAK
    assert pseudo_label(0.5, 0.5, 0.0) == LEAK        # no margin: the file rule (>=) decides
    table = [np.array([0.9, 0.8, 0.7, 0.1]), np.array([0.52, 0.5]), np.array([0.1, 0.3, 0.2])]
    out = pseudo_labels(np.array([0.8, 0.51, 0.2]), table, 0.5, margin=0.05, fraction=0.5)
    assert [p.label for p in out] == [LEAK, None, NOT_LEAK]
    assert [p.kept.tolist() for p in out] == [[0, 1], [], [0, 2]]
    assert label_counts(out) == {"leak": 1, "not_leak": 1, "within_margin": 1, "segments": 4}


def test_kept_segments_fill_rows_repeating_from_the_start() -> None:
    segments = np.arange(5 * 2).reshape(5, 2, 1, 1).astype(np.float32)   # (k=5, S=2, M, T)
    rows = pack_rows(segments, n_long=3)
    assert rows.shape == (2, 3, 2, 1, 1)
    assert rows[:, :, 0, 0, 0].tolist() == [[0, 2, 4], [6, 8, 0]]    # segment 0 fills the gap
    assert pack_rows(segments[:3], 3).shape == (1, 3, 2, 1, 1)
    assert pack_rows(segments[:0], 3).shape == (0, 3, 2, 1, 1)


def test_label_changes_and_accuracy_count_recordings() -> None:
    before = {"a": LEAK, "b": NOT_LEAK, "c": None}
    after = {"a": LEAK, "b": LEAK, "c": NOT_LEAK}
    assert changed_labels(before, after) == 2
    assert label_accuracy(after, {"a": 1, "b": 0, "c": 0}) == pytest.approx(2 / 3)
    assert math.isnan(label_accuracy({"a": None}, {"a": 1}))


def test_round_report_keeps_every_round_and_drops_the_labels() -> None:
    seed = {"round": 0, "status": "seed", "threshold": 0.3, "reason": "",
            "val": {"f1": 0.8, "roc_auc": float("nan")},
            "check": {"fpr": 0.2, "recall": 0.9}, "pseudo": {"leak": 3, "not_leak": 4,
                                                             "within_margin": 1, "segments": 40},
            "labels": {"x.wav": 1}}
    rejected = {"round": 1, "status": "rejected", "threshold": 0.4, "val": {"f1": 0.5},
                "reason": "worse"}
    doc = metrics_document([seed, rejected], 0, "worse")
    assert doc["final_round"] == 0 and doc["rounds_accepted"] == 0
    assert "labels" not in doc["round_0"] and doc["round_0"]["val"]["roc_auc"] is None
    assert doc["round_1"]["status"] == "rejected"
    assert round_row(seed)["check_fpr"] == 0.2 and round_row(rejected)["check_fpr"] is None
    assert round_metrics(rejected)["accepted"] == 0.0
    assert round_metrics(seed)["check/fpr"] == 0.2 and "val/roc_auc" not in round_metrics(seed)


def test_a_round_is_rejected_on_val_first_then_on_the_check_set_when_guarded() -> None:
    seed = {"round": 0, "val": {"f1": 0.80}, "check": {"f1": 0.77}}
    assert rejection(2, seed, 0.785, 0.76, tolerance=0.02, check_guard=True, standing=1) == ""
    val = rejection(2, seed, 0.779, 0.90, tolerance=0.02, check_guard=True, standing=1)
    assert val == ("round 2 rejected: val clip F1 0.7790 is more than 0.02 below the seed's "
                   "0.8000; round 1's detector stands")
    check = rejection(2, seed, 0.80, 0.676, tolerance=0.02, check_guard=True, standing=1)
    assert check.startswith("round 2 rejected: field check set clip F1 0.6760 is more than "
                            "0.02 below the seed's 0.7700")
    assert rejection(2, seed, 0.80, 0.676, tolerance=0.02, check_guard=False, standing=1) == ""
    assert rejection(2, {"round": 0, "val": {"f1": 0.8}}, 0.8, None, tolerance=0.0,
                     check_guard=True, standing=1) == ""           # no check set: val only
    nan = rejection(1, seed, float("nan"), 0.77, tolerance=0.02, check_guard=True, standing=0)
    assert nan.startswith("round 1 rejected: val clip F1 is not a number, against the seed's")


def _first_rejected(rounds: list[tuple[float, float | None]], *, check_guard: bool,
                    tolerance: float = 0.02) -> int | None:
    """Rounds 1.. of ``rounds`` (``rounds[0]`` the seed's (val F1, check F1)) through the
    guard as the stage runs them: the first rejected round, None when all are accepted."""
    seed = {"round": 0, "val": {"f1": rounds[0][0]}, "check": {"f1": rounds[0][1]}}
    standing = 0
    for r, (val_f1, check_f1) in enumerate(rounds[1:], start=1):
        if rejection(r, seed, val_f1, check_f1, tolerance=tolerance, check_guard=check_guard,
                     standing=standing):
            return r
        standing = r
    return None


@pytest.mark.parametrize(("rounds", "check_guard", "rejected"), [
    # each round loses 0.013 val F1 on the one before (under 0.02), 0.026 on the seed: round
    # 2 is rejected (against the previous round the losses would add up unchecked)
    ([(0.800, None), (0.787, None), (0.774, None)], True, 2),
    ([(0.800, None), (0.790, None), (0.781, None)], True, None),   # 0.019 below in all
    ([(0.800, None), (0.770, None)], True, 1),                     # one round, too much
    # a gain, then a loss of more than the tolerance on it but not on the seed: accepted
    ([(0.800, None), (0.850, None), (0.790, None)], True, None),
    # the check set's F1 the same way, guarded only with check_guard
    ([(0.80, 0.700), (0.80, 0.688), (0.80, 0.676)], True, 2),
    ([(0.80, 0.700), (0.80, 0.688), (0.80, 0.676)], False, None),
    ([(0.80, 0.700), (0.80, 0.690), (float("nan"), 0.700)], True, 2),   # NaN: the worst
], ids=["losses-add-up", "within-in-total", "one-big-loss", "gain-then-loss",
        "check-adds-up", "check-unguarded", "nan"])
def test_every_round_is_guarded_against_the_seed(rounds: list[tuple[float, float | None]],
                                                  check_guard: bool,
                                                  rejected: int | None) -> None:
    assert _first_rejected(rounds, check_guard=check_guard) == rejected


def test_the_check_guard_needs_a_check_set() -> None:
    values = dict(source="pool", check="", pool_truth="", rounds=1, keep_fraction=0.5,
                  margin=0.0, pseudo_per_labelled=1.0, epochs=1, learning_rate=1e-3,
                  tolerance=0.02, check_guard=True, seed=0)
    with pytest.raises(ConfigError, match="adapt.check_guard: needs a labelled check set"):
        from_mapping(AdaptConfig, values, "adapt", "params.yaml")
    assert from_mapping(AdaptConfig, {**values, "check_guard": False}, "adapt",
                        "params.yaml").check == ""
