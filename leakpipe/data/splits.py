"""Grouped, stratified, seeded assignment of recordings to train / val / test.

No recording and no group (site / sensor) appears in two splits; class proportions follow the
requested fractions as closely as whole groups allow. Pure function of its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from leakpipe.errors import DataError


def assign_splits(classes: Sequence[str], groups: Sequence[str],
                  fractions: Sequence[float], seed: int) -> np.ndarray:
    """Split index (0 = train, 1 = val, 2 = test) per recording.

    Groups are placed one at a time, largest first (ties broken by a seeded shuffle), each into
    the split where it brings the per-class counts closest to ``fraction x class total``.
    """
    if len(classes) != len(groups):
        raise ValueError("classes and groups must have the same length")
    class_names, class_idx = np.unique(np.asarray(classes), return_inverse=True)
    group_names, group_idx = np.unique(np.asarray(groups), return_inverse=True)
    n_splits = len(fractions)
    if len(group_names) < n_splits:
        raise DataError(f"{len(group_names)} groups cannot fill {n_splits} splits; every split "
                        "needs at least one group (site) of its own")
    # (groups, classes) recording counts
    table = np.zeros((len(group_names), len(class_names)))
    np.add.at(table, (group_idx, class_idx), 1)
    target = np.outer(np.asarray(fractions, dtype=float), table.sum(axis=0))  # (splits, classes)
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(len(group_names))
    order = shuffled[np.argsort(-table[shuffled].sum(axis=1), kind="stable")]
    counts = np.zeros_like(target)
    group_split = np.full(len(group_names), -1)
    for g in order:
        costs = [_cost(counts, target, s, table[g]) for s in range(n_splits)]
        # an empty split takes the group first while groups remain for the others
        empty = [s for s in range(n_splits) if not counts[s].any()]
        remaining = int((group_split < 0).sum())
        best = empty[0] if empty and remaining <= len(empty) else int(np.argmin(costs))
        group_split[g] = best
        counts[best] += table[g]
    return group_split[group_idx]


def _cost(counts: np.ndarray, target: np.ndarray, split: int, add: np.ndarray) -> float:
    trial = counts.copy()
    trial[split] += add
    scale = np.maximum(target.sum(axis=0), 1.0)
    return float((((trial - target) / scale) ** 2).sum())
