"""Grouped, stratified splits: no group or recording in two splits, proportions followed."""

from __future__ import annotations

import numpy as np
import pytest

from leakpipe.data.splits import assign_splits
from leakpipe.errors import DataError


def _table(n_groups: int, per_class: dict[str, int]) -> tuple[list[str], list[str]]:
    classes, groups = [], []
    for g in range(n_groups):
        for cls, n in per_class.items():
            classes += [cls] * n
            groups += [f"site{g:02d}"] * n
    return classes, groups


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("n_groups", [3, 5, 12, 40])
def test_groups_never_cross_splits(seed: int, n_groups: int) -> None:
    classes, groups = _table(n_groups, {"LEAK": 5, "NORMAL": 4, "BACKGROUND": 3})
    split = assign_splits(classes, groups, (0.7, 0.2, 0.1), seed)
    groups = np.asarray(groups)
    for s in range(3):
        mine = set(groups[split == s])
        others = set(groups[split != s])
        assert mine and not mine & others


def test_proportions_and_strata_with_many_groups() -> None:
    classes, groups = _table(100, {"LEAK": 2, "NORMAL": 3})
    split = assign_splits(classes, groups, (0.7, 0.2, 0.1), seed=5)
    fractions = np.bincount(split, minlength=3) / len(split)
    np.testing.assert_allclose(fractions, [0.7, 0.2, 0.1], atol=0.02)
    classes = np.asarray(classes)
    for s in range(3):
        assert {"LEAK", "NORMAL"} <= set(classes[split == s])


def test_ungrouped_recordings_stratify_each_class() -> None:
    classes = ["LEAK"] * 30 + ["NORMAL"] * 70
    split = assign_splits(classes, [f"r{i}" for i in range(100)], (0.7, 0.2, 0.1), seed=0)
    leak = np.asarray(classes) == "LEAK"
    assert np.bincount(split[leak], minlength=3).tolist() == [21, 6, 3]


def test_deterministic_for_a_seed_and_varies_across_seeds() -> None:
    classes, groups = _table(20, {"LEAK": 2, "NORMAL": 2})
    a = assign_splits(classes, groups, (0.7, 0.2, 0.1), seed=11)
    b = assign_splits(classes, groups, (0.7, 0.2, 0.1), seed=11)
    c = [assign_splits(classes, groups, (0.7, 0.2, 0.1), seed=s) for s in range(5)]
    np.testing.assert_array_equal(a, b)
    assert any((x != a).any() for x in c)


def test_too_few_groups() -> None:
    with pytest.raises(DataError, match="2 groups cannot fill 3 splits"):
        assign_splits(["LEAK", "NORMAL"], ["a", "b"], (0.7, 0.2, 0.1), seed=0)
