"""Fold and inner-val assignment over groups (sites), stratified by class. Pure functions.

Each group lands in exactly one test fold (``assign_splits`` with K equal fractions: groups are
placed largest first where they bring the per-class counts closest to an equal share). Inside a
fold the remaining groups are split again, grouped and stratified, into the fold's train and
val: val chooses the CNN's best epoch, every threshold and the baselines' hyper-parameters, so
nothing about the test fold reaches a choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from leakpipe.constants import LEAK_CLASS
from leakpipe.data.splits import assign_splits
from leakpipe.errors import DataError

TRAIN, VAL, TEST = "train", "val", "test"
ROLES = (TRAIN, VAL, TEST)


@dataclass(frozen=True)
class Fold:
    """The role of every recording in one fold: index arrays into the recording table."""

    index: int
    train: np.ndarray      # (n_train,) int recording indices
    val: np.ndarray
    test: np.ndarray

    def rows(self, role: str) -> np.ndarray:
        return {TRAIN: self.train, VAL: self.val, TEST: self.test}[role]


def assign_folds(labels: Sequence[str], groups: Sequence[str], k: int, seed: int) -> np.ndarray:
    """Test fold (0 .. k - 1) of every recording; no group is in two folds."""
    n_groups = len(set(groups))
    if n_groups < k:
        raise DataError(f"{n_groups} groups (sites) cannot fill {k} folds; lower cv.folds")
    return assign_splits(labels, groups, [1.0 / k] * k, seed)


def make_folds(labels: Sequence[str], groups: Sequence[str], k: int, val_fraction: float,
               seed: int) -> list[Fold]:
    """K folds: each its test groups and a grouped, stratified train / val split of the rest."""
    labels, groups = np.asarray(labels), np.asarray(groups)
    _check_both_classes(labels, groups)
    fold_of = assign_folds(labels, groups, k, seed)
    folds = []
    for f in range(k):
        test = np.flatnonzero(fold_of == f)
        rest = np.flatnonzero(fold_of != f)
        inner = _inner_split(labels[rest], groups[rest], val_fraction, seed + 1 + f, f, k)
        folds.append(Fold(f, train=rest[inner == 0], val=rest[inner == 1], test=test))
        _check_classes(folds[-1], labels, groups, k)
    return folds


def _inner_split(labels: np.ndarray, groups: np.ndarray, val_fraction: float, seed: int,
                 fold: int, k: int) -> np.ndarray:
    """Fold ``fold``'s inner train (0) / val (1) split of the sites outside its test fold; a
    rest too small to split names that split, its sites per class and what to change."""
    try:
        return assign_splits(labels, groups, [1.0 - val_fraction, val_fraction], seed)
    except DataError:
        raise DataError(
            f"fold {fold}: its inner train / val split (of the sites outside its test fold) "
            f"needs 2 sites, {len(set(groups.tolist()))} remain (sites per class outside the "
            f"test fold {sites_per_class(labels, groups)}); add sites, or lower cv.folds "
            f"(now {k}): each fold keeps about (folds - 1) / folds of the sites") from None


def sites_per_class(labels: np.ndarray, groups: np.ndarray) -> dict[str, int]:
    """Distinct groups (sites) holding each class: ``{"LEAK": 4, "NOLEAK": 9}``."""
    return {str(c): len(set(groups[labels == c])) for c in sorted(set(labels.tolist()))}


def _check_both_classes(labels: np.ndarray, groups: np.ndarray) -> None:
    """No fold count or val share can help data of one side only: say what to add."""
    leak = labels == LEAK_CLASS
    if leak.any() and not leak.all():
        return
    found = sites_per_class(labels, groups)
    add = ("recordings of a non-leak class (e.g. NOLEAK, NORMAL)" if leak.any()
           else f"{LEAK_CLASS} recordings")
    raise DataError(f"the recordings hold one side only, sites per class {found}: "
                    f"cross-validation needs {LEAK_CLASS} and not-{LEAK_CLASS}; add {add} "
                    "from at least 3 sites to the source")


def _check_classes(fold: Fold, labels: np.ndarray, groups: np.ndarray, k: int) -> None:
    """Training needs both LEAK and not LEAK; a fold without one cannot be trained or judged."""
    for role in ROLES:
        leak = labels[fold.rows(role)] == LEAK_CLASS
        if leak.all() or not leak.any():
            which = "no recording" if not leak.size else ("only LEAK" if leak.all()
                                                          else "no LEAK")
            side = sites_per_class(np.where(labels == LEAK_CLASS, LEAK_CLASS, "not-LEAK"),
                                   groups)
            raise DataError(f"fold {fold.index + 1}: its {role} part holds {which} "
                            f"recordings; sites per class {side}, and each of the {k} folds "
                            "needs sites of both in its train, val and test parts: lower "
                            "cv.folds (--folds), raise cv.val_fraction, or add sites of the "
                            "smaller side")
