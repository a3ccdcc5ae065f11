"""Honest operating point: the threshold (and, if asked, the rule) chosen on the val split only.

Every rule turns a file into one score with ``LEAK <=> score >= threshold``
(``leakpipe.decision.voting``), so a whole threshold grid is decided in one comparison and its
confusion counts in one pass. The criterion picks a grid index:

- ``max_f1``: the highest clip F1 (among tied thresholds the middle one, ``best_index``).
- ``target_sensitivity``: among thresholds whose sensitivity reaches ``target``, the one with
  the highest specificity; ``target_specificity`` the other way round. When no threshold
  reaches the target, the one closest to it is taken and ``met`` is False (said in the report).

The functions here take the val scores and labels only: nothing of the test split can reach the
choice. The orchestrator applies the chosen point unchanged to the test split.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np

from leakpipe.decision.metrics import BinaryMetrics, best_index, binary_metrics
from leakpipe.decision.voting import RULES, Rule, decide, file_scores

log = logging.getLogger(__name__)

Criterion = Literal["max_f1", "target_sensitivity", "target_specificity"]
CRITERIA: tuple[str, ...] = ("max_f1", "target_sensitivity", "target_specificity")
TARGET_TOLERANCE = 1e-12   # a rate equal to the target (up to float rounding) reaches it


@dataclass(frozen=True)
class Choice:
    """A grid index, the value the criterion ranks by there, and whether a target was met."""

    index: int
    value: float
    met: bool


@dataclass(frozen=True)
class OperatingPoint:
    """The decision chosen on val: rule, threshold and how they were chosen."""

    rule: Rule
    threshold: float
    vote_fraction: float
    criterion: Criterion
    target: float
    value: float                          # criterion value on val at the chosen point
    met: bool                             # False when a target rate was out of reach
    grid: np.ndarray                      # (K,) thresholds tried
    curves: dict[str, BinaryMetrics]      # rule -> val metrics over the grid, each (K,)

    @property
    def index(self) -> int:
        return int(np.flatnonzero(np.isclose(self.grid, self.threshold))[0])

    @property
    def val_curve(self) -> BinaryMetrics:
        return self.curves[self.rule]


def choose(metrics: BinaryMetrics, criterion: Criterion, target: float) -> Choice:
    """The grid index the criterion prefers in ``metrics`` (arrays of shape (K,))."""
    if criterion == "max_f1":
        index = best_index(metrics.f1)
        return Choice(index, float(metrics.f1[index]), True)
    if criterion == "target_sensitivity":
        primary, secondary = metrics.recall, metrics.specificity
    elif criterion == "target_specificity":
        primary, secondary = metrics.specificity, metrics.recall
    else:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    reached = primary >= target - TARGET_TOLERANCE                  # (K,)
    if not reached.any():
        index = best_index(primary)
        return Choice(index, float(secondary[index]), False)
    index = best_index(np.where(reached, secondary, -np.inf))
    return Choice(index, float(secondary[index]), True)


def rule_curves(seg_probs: np.ndarray, truth: np.ndarray, grid: np.ndarray,
                rules: tuple[str, ...], vote_fraction: float) -> dict[str, BinaryMetrics]:
    """Val metrics of every grid threshold for each rule: (F, L, S), (F,) -> rule -> (K,)."""
    return {rule: binary_metrics(truth, decide(file_scores(seg_probs, rule, vote_fraction), grid))
            for rule in rules}


def select_operating_point(seg_probs: np.ndarray, truth: np.ndarray, grid: np.ndarray, *,
                           rule: Rule, vote_fraction: float, criterion: Criterion,
                           target: float, select_rule: bool = False) -> OperatingPoint:
    """Choose on val: (F, L, S) segment probs and (F,) 0/1 truth of the VAL split only.

    With ``select_rule`` every rule competes (a met target ranks above a missed one, then the
    criterion value); ties keep ``rule``, then the order of ``RULES``.
    """
    rules = (rule, *(r for r in RULES if r != rule)) if select_rule else (rule,)
    curves = rule_curves(seg_probs, truth, grid, rules, vote_fraction)
    choices = {r: choose(curves[r], criterion, target) for r in rules}
    best = max(rules, key=lambda r: (choices[r].met, choices[r].value))  # first of equals
    pick = choices[best]
    if not pick.met:
        log.warning("no val threshold reaches %s %.3g; took the closest (%s)", criterion,
                    target, best)
    return OperatingPoint(rule=best, threshold=float(grid[pick.index]),
                          vote_fraction=vote_fraction, criterion=criterion, target=target,
                          value=pick.value, met=pick.met, grid=np.asarray(grid), curves=curves)
