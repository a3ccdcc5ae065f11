"""Operating point on val: criteria, rule choice, and each rule applied to hand-made tables."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from leakpipe.config import load_section
from leakpipe.constants import BINARY_CLASSES
from leakpipe.decision.calibration import IDENTITY
from leakpipe.decision.metrics import BinaryMetrics, binary_metrics
from leakpipe.decision.select import OperatingPoint, choose, select_operating_point
from leakpipe.decision.voting import RULES, threshold_grid
from leakpipe.evaluate.detector_evaluation import split_result
from leakpipe.evaluate.figures import FileTable
from leakpipe.scoring.score import Scores
from tests.conftest import PARAMS

GRID = threshold_grid(0.1, 0.9, 0.1)


def _metrics(tp: list[int], fp: list[int], tn: list[int], fn: list[int]) -> BinaryMetrics:
    return BinaryMetrics(*(np.array(v) for v in (tp, fp, tn, fn)))


@pytest.mark.parametrize(("counts", "criterion", "target", "index", "met"), [
    # F1 per index: 0.667, 0.8, 0.8, 0.8, 0.5 -> the middle of the three tied best
    (([4, 4, 4, 4, 1], [4, 2, 2, 2, 0], [0, 2, 2, 2, 4], [0, 0, 0, 0, 3]), "max_f1", 0.9, 2,
     True),
    # sensitivity 1, 1, 0.75, 0.5 with specificity 0, 0.5, 0.75, 1: the target 0.75 is reached
    # exactly at index 2 (a tie at the target counts), which has the best specificity
    (([4, 4, 3, 2], [4, 2, 1, 0], [0, 2, 3, 4], [0, 0, 1, 2]), "target_sensitivity", 0.75, 2,
     True),
    (([4, 4, 3, 2], [4, 2, 1, 0], [0, 2, 3, 4], [0, 0, 1, 2]), "target_specificity", 0.5, 1,
     True),
    # no threshold reaches sensitivity 1: the closest (highest) one, flagged as missed
    (([3, 2, 1], [2, 1, 0], [2, 3, 4], [1, 2, 3]), "target_sensitivity", 1.0, 0, False),
])
def test_choose_by_criterion(counts: tuple, criterion: str, target: float, index: int,
                             met: bool) -> None:
    choice = choose(_metrics(*counts), criterion, target)  # type: ignore[arg-type]
    assert (choice.index, choice.met) == (index, met)


def test_unknown_criterion_is_rejected() -> None:
    with pytest.raises(ValueError, match="criterion must be one of"):
        choose(_metrics([1], [0], [1], [0]), "max_auc", 0.5)  # type: ignore[arg-type]


def _files(*long_probs: list[float], shorts: int = 2) -> np.ndarray:
    """Each argument is one file's long-segment probs -> (F, L, S), equal short segments."""
    return np.repeat(np.array(long_probs, dtype=np.float64)[:, :, None], shorts, axis=2)


def test_max_f1_threshold_on_a_hand_made_val_table() -> None:
    # long_vote at 0.5: a file is LEAK when >= 2 of its 4 long probs reach the threshold,
    # i.e. when its 2nd largest long prob does: leaks 0.7, 0.6; non-leaks 0.35, 0.2
    probs = _files([0.9, 0.7, 0.1, 0.1], [0.6, 0.6, 0.6, 0.0],
                   [0.8, 0.35, 0.3, 0.1], [0.2, 0.2, 0.2, 0.2])
    truth = np.array([True, True, False, False])
    point = select_operating_point(probs, truth, GRID, rule="long_vote", vote_fraction=0.5,
                                   criterion="max_f1", target=0.9)
    # thresholds 0.4, 0.5, 0.6 separate perfectly: the middle one is kept
    assert (point.rule, point.threshold, point.value, point.met) == ("long_vote", 0.5, 1.0, True)
    np.testing.assert_allclose(point.val_curve.f1[[2, 3, 4, 5, 6]], [0.8, 1, 1, 1, 2 / 3])


def test_rule_is_chosen_on_val_only_when_asked() -> None:
    # each leak has ONE loud long segment: any_long separates, long_vote does not
    probs = _files([0.9, 0.1, 0.1, 0.1], [0.8, 0.2, 0.1, 0.1],
                   [0.3, 0.3, 0.3, 0.3], [0.4, 0.1, 0.1, 0.1])
    truth = np.array([True, True, False, False])
    kept = select_operating_point(probs, truth, GRID, rule="long_vote", vote_fraction=0.5,
                                  criterion="max_f1", target=0.9)
    chosen = select_operating_point(probs, truth, GRID, rule="long_vote", vote_fraction=0.5,
                                    criterion="max_f1", target=0.9, select_rule=True)
    assert kept.rule == "long_vote" and kept.value < 1.0
    assert chosen.rule == "any_long" and chosen.value == 1.0
    assert 0.4 < chosen.threshold <= 0.8
    assert set(chosen.curves) == set(RULES)


def _point(rule: str, threshold: float, vote_fraction: float = 0.5) -> OperatingPoint:
    return OperatingPoint(rule=rule, threshold=threshold, vote_fraction=vote_fraction,  # type: ignore[arg-type]
                          criterion="max_f1", target=0.9, value=1.0, met=True,
                          grid=np.array([threshold]), curves={})


def _scores(probs: np.ndarray, labels: np.ndarray) -> Scores:
    n = len(labels)
    return Scores(seg_probs=probs, class_probs=np.full((n, 2), 0.5),
                  seg_pred=np.zeros(probs.size, np.int64), loss=float("nan"), seconds=1.0,
                  batch_files=n)


def _table(labels: np.ndarray) -> FileTable:
    n = len(labels)
    return FileTable(recording_id=np.array([f"r{i}" for i in range(n)]), clip=np.zeros(n, int),
                     group=np.array(["g"] * n), label=labels, class_names=BINARY_CLASSES,
                     leak_index=1)


# One file per case, 4 long segments of 2 short segments each; the decision of the stage.
@pytest.mark.parametrize(("rule", "threshold", "vote", "probs", "leak"), [
    # long_vote: exactly half (2 of 4) of the long probs reach 0.5 -> LEAK; 1 of 4 -> not
    ("long_vote", 0.5, 0.5, [[0.5, 0.5], [0.4, 0.6], [0.2, 0.2], [0.1, 0.1]], True),
    ("long_vote", 0.5, 0.5, [[0.5, 0.5], [0.4, 0.5], [0.2, 0.2], [0.1, 0.1]], False),
    # a long prob equal to the threshold counts (tie), a hair below does not
    ("long_vote", 0.25, 1.0, [[0.25, 0.25]] * 4, True),
    ("long_vote", 0.25, 1.0, [[0.25, 0.25]] * 3 + [[0.25, 0.2499]], False),
    # frac_vote with another fraction: 3 of 8 short segments reach 0.7
    ("frac_vote", 0.7, 0.375, [[0.7, 0.1], [0.8, 0.9], [0.1, 0.1], [0.1, 0.1]], True),
    ("frac_vote", 0.7, 0.5, [[0.7, 0.1], [0.8, 0.9], [0.1, 0.1], [0.1, 0.1]], False),
    # mean of long probs exactly at the threshold
    ("mean", 0.4, 0.5, [[0.2, 0.6], [0.4, 0.4], [0.1, 0.3], [0.6, 0.6]], True),
    ("mean", 0.41, 0.5, [[0.2, 0.6], [0.4, 0.4], [0.1, 0.3], [0.6, 0.6]], False),
    # any_long: one long segment at the threshold is enough
    ("any_long", 0.75, 0.5, [[0.1, 0.1], [0.5, 1.0], [0.1, 0.1], [0.1, 0.1]], True),
    ("any_long", 0.76, 0.5, [[0.1, 0.1], [0.5, 1.0], [0.1, 0.1], [0.1, 0.1]], False),
])
def test_stage_applies_each_rule(rule: str, threshold: float, vote: float, probs: list,
                                 leak: bool) -> None:
    cfg = dataclasses.replace(load_section(PARAMS, "evaluate"), bootstrap_resamples=0)
    labels = np.array([1])
    result = split_result("test", _table(labels), _scores(np.array([probs]), labels),
                          _point(rule, threshold, vote), cfg, 0.5, binary=True, bootstrap=False)
    assert result.decision.tolist() == [leak]
    assert result.rows(IDENTITY)[0]["leak_decision"] == ("LEAK" if leak else "NOLEAK")
    assert result.metrics["test/clip_recall"] == float(leak)


def test_frac_long_over_counts_long_segments_at_the_threshold() -> None:
    cfg = dataclasses.replace(load_section(PARAMS, "evaluate"), bootstrap_resamples=0)
    labels = np.array([1, 0])
    probs = _files([0.5, 0.7, 0.2, 0.1], [0.49, 0.1, 0.1, 0.1])
    result = split_result("test", _table(labels), _scores(probs, labels),
                          _point("long_vote", 0.5), cfg, 0.5, binary=True, bootstrap=False)
    assert result.frac_over.tolist() == [0.5, 0.0]
    assert [r["frac_long_over"] for r in result.rows(IDENTITY)] == [0.5, 0.0]
    assert binary_metrics(labels, result.decision).f1[0] == 1.0
