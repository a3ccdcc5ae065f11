"""Decision rules: tables incl. ties at the threshold and exactly half the long segments."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from leakpipe.decision.voting import (
    decide,
    file_decisions,
    file_scores,
    long_segment_probs,
    min_votes,
    segment_leak_prob,
    threshold_grid,
)

RULES = ["long_vote", "frac_vote", "mean", "any_long"]


def _probs(*long_segments: list[float]) -> np.ndarray:
    """One file: each argument is one long segment's short-segment probs -> (1, L, S)."""
    return np.array([long_segments], dtype=np.float32)


@pytest.mark.parametrize(("mode", "leak_index", "expected"), [
    ("softmax", 2, 0.5),                    # logits (0, 0, ln 2): softmax[2] = 2 / 4
    ("aux", 2, 0.75),                       # sigmoid(ln 3)
    ("blend", 2, 0.625),                    # 0.5 * 0.5 + 0.5 * 0.75
    ("softmax", 0, 0.25),                   # the leak index picks the column
])
def test_segment_leak_prob_modes(mode: str, leak_index: int, expected: float) -> None:
    logits = torch.tensor([[0.0, 0.0, math.log(2.0)]])
    aux = torch.tensor([math.log(3.0)])
    assert segment_leak_prob(logits, aux, leak_index, mode).item() == pytest.approx(expected)


def test_unknown_mode_and_rule_are_rejected() -> None:
    with pytest.raises(ValueError, match="prob_mode must be one of"):
        segment_leak_prob(torch.zeros(1, 2), torch.zeros(1), 1, "max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rule must be one of"):
        file_scores(_probs([0.5]), "majority")  # type: ignore[arg-type]


@pytest.mark.parametrize(("n", "fraction", "votes"), [
    (4, 0.5, 2), (23, 0.5, 12), (10, 0.3, 3), (3, 1.0, 3), (5, 1e-4, 1), (7, 0.0, 0),
    (2, 1.5, 3),
])
def test_min_votes_is_exact(n: int, fraction: float, votes: int) -> None:
    assert min_votes(n, fraction) == votes


def test_long_segment_prob_is_the_mean_of_its_short_segments() -> None:
    assert long_segment_probs(_probs([0.2, 0.4], [1.0, 0.0])).tolist()[0] == \
        pytest.approx([0.3, 0.5])


@pytest.mark.parametrize(("rule", "probs", "threshold", "vote", "leak"), [
    # long_vote: long probs (0.5, 0.5, 0.2, 0.1): exactly half reach 0.5 -> LEAK
    ("long_vote", _probs([0.5, 0.5], [0.4, 0.6], [0.2, 0.2], [0.1, 0.1]), 0.5, 0.5, True),
    # ... one fewer -> NOLEAK
    ("long_vote", _probs([0.5, 0.5], [0.4, 0.5], [0.2, 0.2], [0.1, 0.1]), 0.5, 0.5, False),
    # tie exactly at the threshold counts as LEAK; just above it does not
    ("long_vote", _probs([0.25, 0.25], [0.25, 0.25]), 0.25, 1.0, True),
    ("long_vote", _probs([0.25, 0.25], [0.25, 0.25]), 0.2501, 1.0, False),
    # 23 long segments: 12 votes needed for 0.5, 11 are not enough
    ("long_vote", np.array([[[0.9]] * 12 + [[0.1]] * 11]), 0.5, 0.5, True),
    ("long_vote", np.array([[[0.9]] * 11 + [[0.1]] * 12]), 0.5, 0.5, False),
    # frac_vote votes over short segments: 2 of 4 reach 0.5
    ("frac_vote", _probs([0.5, 0.0], [0.9, 0.1]), 0.5, 0.5, True),
    ("frac_vote", _probs([0.5, 0.0], [0.9, 0.1]), 0.5, 0.75, False),
    # mean of all segments: 0.5 exactly
    ("mean", _probs([0.25, 0.75], [0.5, 0.5]), 0.5, 0.5, True),
    ("mean", _probs([0.25, 0.75], [0.5, 0.25]), 0.5, 0.5, False),
    # any_long: the best long segment (0.55) decides
    ("any_long", _probs([0.1, 0.1], [0.6, 0.5]), 0.55, 0.5, True),
    ("any_long", _probs([0.1, 0.1], [0.6, 0.5]), 0.56, 0.5, False),
])
def test_rule_table(rule: str, probs: np.ndarray, threshold: float, vote: float,
                    leak: bool) -> None:
    assert file_decisions(probs, threshold, rule, vote).tolist() == [[leak]]


def _reference(probs: np.ndarray, threshold: float, rule: str, vote: float) -> np.ndarray:
    """The rules as written in words, one threshold at a time."""
    long_probs = probs.mean(axis=-1)
    if rule == "long_vote":
        return (long_probs >= threshold).mean(axis=-1) >= vote
    if rule == "frac_vote":
        return (probs >= threshold).reshape(len(probs), -1).mean(axis=-1) >= vote
    if rule == "mean":
        return probs.reshape(len(probs), -1).mean(axis=-1) >= threshold
    return (long_probs >= threshold).any(axis=-1)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("vote", [0.5, 0.3, 1.0])
def test_vectorised_grid_matches_the_definition(rule: str, vote: float) -> None:
    rng = np.random.default_rng(0)
    probs = np.round(rng.random((40, 10, 4)), 2).astype(np.float32)   # rounding makes ties
    grid = threshold_grid(0.05, 0.95, 0.05)
    got = file_decisions(probs, grid, rule, vote)
    assert got.shape == (len(grid), 40)
    for k, threshold in enumerate(grid):
        np.testing.assert_array_equal(got[k], _reference(probs, threshold, rule, vote))


def test_threshold_grid_is_inclusive_and_clean() -> None:
    grid = threshold_grid(0.1, 0.9, 0.05)
    assert len(grid) == 17 and grid[0] == 0.1 and grid[-1] == 0.9
    assert 0.3 in grid.tolist() and 0.55 in grid.tolist()
    assert threshold_grid(0.5, 0.5, 0.1).tolist() == [0.5]


def test_decide_puts_thresholds_first() -> None:
    got = decide(np.array([0.2, 0.6]), np.array([0.1, 0.5, 0.9]))
    assert got.tolist() == [[True, True], [False, True], [False, False]]
