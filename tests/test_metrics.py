"""Confusion-matrix metrics vs scikit-learn, threshold choice, and the collapse diagnosis."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from leakpipe.decision.metrics import (
    best_index,
    binary_metrics,
    diagnose,
    dominant_class,
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_match_scikit_learn_for_every_threshold(seed: int) -> None:
    rng = np.random.default_rng(seed)
    truth = rng.random(200) < 0.3
    scores = np.clip(truth * 0.3 + rng.random(200) * 0.7, 0, 1)
    grid = np.linspace(0.0, 1.0, 21)
    decisions = scores[None, :] >= grid[:, None]                   # (K, N)
    got = binary_metrics(truth, decisions)
    for k in range(len(grid)):
        pred = decisions[k]
        assert got.accuracy[k] == pytest.approx(accuracy_score(truth, pred))
        assert got.precision[k] == pytest.approx(precision_score(truth, pred, zero_division=0))
        assert got.recall[k] == pytest.approx(recall_score(truth, pred, zero_division=0))
        assert got.specificity[k] == pytest.approx(
            recall_score(truth, pred, pos_label=0, zero_division=0))
        assert got.f1[k] == pytest.approx(f1_score(truth, pred, zero_division=0))


def test_counts_and_zero_division() -> None:
    got = binary_metrics(np.array([1, 1, 0, 0]), np.array([[0, 0, 0, 0], [1, 0, 1, 0]]))
    assert (got.tp.tolist(), got.fp.tolist(), got.tn.tolist(), got.fn.tolist()) == \
        ([0, 1], [0, 1], [2, 1], [2, 1])
    assert got.at(0) == {"accuracy": 0.5, "precision": 0.0, "recall": 0.0, "specificity": 1.0,
                         "f1": 0.0}
    assert got.at(1)["f1"] == pytest.approx(0.5)


@pytest.mark.parametrize(("values", "index"), [
    ([0.1, 0.9, 0.5], 1),
    ([0.9, 0.9, 0.9, 0.2], 1),        # ties: the middle of the plateau
    ([0.2, 0.9, 0.9, 0.9, 0.9], 2),
    ([0.0, 0.0], 0),
])
def test_best_index_prefers_the_centre_of_ties(values: list[float], index: int) -> None:
    assert best_index(np.array(values)) == index


@pytest.mark.parametrize(("truth", "pred", "scores", "threshold", "expected"), [
    ([0, 0, 0], [0, 1, 0], None, None, "no positives present: none of the 3 samples is LEAK"),
    ([1, 0, 1], [0, 0, 0], [0.3, 0.2, 0.4], 0.5,
     "no positives predicted: all 3 samples predicted NOLEAK (2 leaks missed); threshold 0.5 "
     "is above the probability mass (max score 0.4, median 0.3)"),
    ([1, 0, 1], [0, 0, 0], [0.3, 0.2, 0.6], 0.7,
     "no positives predicted: all 3 samples predicted NOLEAK (2 leaks missed); threshold 0.7"),
    ([1, 0, 0, 1], [1, 1, 1, 1], None, None, "collapse: all 4 samples predicted LEAK (2 false"),
    ([1, 0, 0], [0, 1, 1], None, None, "F1 = 0: 2 samples predicted LEAK, none of them is one"),
])
def test_diagnose_table(truth, pred, scores, threshold, expected: str) -> None:
    line = diagnose(np.array(truth), np.array(pred),
                    None if scores is None else np.array(scores), threshold)
    assert line is not None and line.startswith(expected) and "\n" not in line


def test_no_diagnosis_when_healthy_or_threshold_inside_the_mass() -> None:
    assert diagnose(np.array([1, 0, 1]), np.array([1, 0, 0])) is None
    line = diagnose(np.array([1, 0]), np.array([0, 0]), np.array([0.6, 0.1]), 0.7)
    assert line is not None and "threshold" in line
    line = diagnose(np.array([1, 0]), np.array([0, 0]), np.array([0.8, 0.1]), 0.7)
    assert line is not None and "threshold" not in line       # scores exist above it


def test_dominant_class_flags_a_collapse_only_against_the_truth() -> None:
    names = ("BACKGROUND", "LEAK")
    assert dominant_class([1, 199], [100, 100], names) == \
        "collapse: 99.5 % of segments predicted LEAK (true share 50.0 %)"
    assert dominant_class([1, 199], [1, 199], names) is None    # the data really is one class
    assert dominant_class([60, 140], [100, 100], names) is None
    assert dominant_class([0, 0], [1, 1], names) is None


def test_roc_auc_matches_scikit_learn_with_ties_and_is_nan_for_one_class() -> None:
    from sklearn.metrics import roc_auc_score

    from leakpipe.decision.metrics import roc_auc

    rng = np.random.default_rng(3)
    for _ in range(20):
        truth = rng.random(40) < 0.3
        truth[:2] = [True, False]
        scores = np.round(rng.random(40), 1)            # many ties
        assert roc_auc(truth, scores) == pytest.approx(roc_auc_score(truth, scores), abs=1e-12)
    assert roc_auc(np.array([True, True]), np.array([0.1, 0.2])) != roc_auc(
        np.array([True, True]), np.array([0.1, 0.2]))    # NaN
