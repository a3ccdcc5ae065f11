"""Evaluation figures against scikit-learn on random data, and the recording bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    confusion_matrix,
    f1_score,
    precision_score,
    recall_score,
    roc_auc_score,
)

from leakpipe.evaluate import bootstrap
from leakpipe.evaluate.bootstrap import (
    bootstrap_intervals,
    percentile_interval,
    rate_intervals,
    recording_weights,
    weighted_counts,
    weighted_ranking,
    wilson_interval,
)
from leakpipe.evaluate.figures import binary_figures, class_metrics, ranking_metrics


def _random(seed: int, n: int = 120) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.random(n) < 0.4
    scores = np.round(np.clip(0.3 * truth + 0.7 * rng.random(n), 0, 1), 2)  # rounding: ties
    return truth, scores, scores >= 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_figures_match_scikit_learn(seed: int) -> None:
    truth, scores, pred = _random(seed)
    got = binary_figures(truth, pred, scores)
    tn, fp, fn, tp = confusion_matrix(truth, pred).ravel()
    assert (got["tp"], got["fp"], got["tn"], got["fn"]) == (tp, fp, tn, fn)
    assert got["accuracy"] == pytest.approx(accuracy_score(truth, pred))
    assert got["precision"] == pytest.approx(precision_score(truth, pred))
    assert got["recall"] == pytest.approx(recall_score(truth, pred))
    assert got["specificity"] == pytest.approx(recall_score(truth, pred, pos_label=0))
    assert got["f1"] == pytest.approx(f1_score(truth, pred))
    assert got["roc_auc"] == pytest.approx(roc_auc_score(truth, scores))
    assert got["pr_auc"] == pytest.approx(average_precision_score(truth, scores))


def test_ranking_metrics_are_nan_with_one_class() -> None:
    got = ranking_metrics(np.zeros(5, bool), np.linspace(0, 1, 5))
    assert np.isnan(got["roc_auc"]) and np.isnan(got["pr_auc"])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_weighted_ranking_matches_scikit_learn_per_row(seed: int) -> None:
    truth, scores, _ = _random(seed, 60)
    weights = np.random.default_rng(seed).integers(0, 4, (5, 60)).astype(float)  # (B, F)
    weights[0] = 1.0
    roc, ap = weighted_ranking(scores, truth, weights)
    for b in range(len(weights)):
        w = weights[b]
        assert roc[b] == pytest.approx(roc_auc_score(truth, scores, sample_weight=w))
        assert ap[b] == pytest.approx(average_precision_score(truth, scores, sample_weight=w))


def test_weighted_ranking_is_nan_without_both_classes() -> None:
    truth = np.array([True, False, True])
    roc, ap = weighted_ranking(np.array([0.9, 0.2, 0.4]), truth, np.array([[1.0, 0.0, 2.0]]))
    assert np.isnan(roc[0]) and ap[0] == pytest.approx(1.0)


def test_weighted_counts_match_scikit_learn_with_sample_weight() -> None:
    truth, _, pred = _random(5, 50)
    weights = np.random.default_rng(5).integers(0, 3, (3, 50)).astype(float)
    counts = weighted_counts(truth, pred, weights)
    for b, w in enumerate(weights):
        assert counts.f1[b] == pytest.approx(f1_score(truth, pred, sample_weight=w))
        assert counts.recall[b] == pytest.approx(recall_score(truth, pred, sample_weight=w))


def test_recording_weights_move_clips_of_a_recording_together() -> None:
    ids = np.array(["a", "a", "b", "c", "c", "c"])
    weights = recording_weights(ids, 200, np.random.default_rng(0))   # (200, 6)
    assert weights.shape == (200, 6)
    assert (weights[:, 0] == weights[:, 1]).all() and (weights[:, 3] == weights[:, 5]).all()
    # each resample draws 3 recordings: the weights of one clip per recording sum to 3
    assert (weights[:, [0, 2, 3]].sum(axis=1) == 3).all()
    assert weights.mean() == pytest.approx(1.0, abs=0.1)


def test_bootstrap_intervals_cover_the_estimate_and_shrink_with_data() -> None:
    truth, scores, pred = _random(0, 100)
    ids = np.arange(100).astype(str)
    small = bootstrap_intervals(truth[:25], pred[:25], scores[:25], ids[:25], resamples=400,
                                confidence=0.9, seed=0)
    large = bootstrap_intervals(truth, pred, scores, ids, resamples=400, confidence=0.9, seed=0)
    point = binary_figures(truth, pred, scores)
    for name in ("accuracy", "precision", "recall", "specificity", "f1", "roc_auc", "pr_auc"):
        assert large[name].low <= point[name] <= large[name].high, name
        assert large[name].high - large[name].low < small[name].high - small[name].low, name
    again = bootstrap_intervals(truth, pred, scores, ids, resamples=400, confidence=0.9, seed=0)
    assert again == large


def test_bootstrap_resamples_recordings_not_clips() -> None:
    """Two identical clips per recording: the same intervals as one clip per recording."""
    truth, scores, pred = _random(3, 40)
    ids = np.arange(40).astype(str)
    single = bootstrap_intervals(truth, pred, scores, ids, resamples=300, confidence=0.95, seed=1)
    double = bootstrap_intervals(np.repeat(truth, 2), np.repeat(pred, 2), np.repeat(scores, 2),
                                 np.repeat(ids, 2), resamples=300, confidence=0.95, seed=1)
    for name, interval in single.items():
        assert double[name].low == pytest.approx(interval.low), name
        assert double[name].high == pytest.approx(interval.high), name


@pytest.mark.parametrize(("k", "n", "low", "high"), [
    (0, 10, 0.0, 0.27753),       # Wilson (1927): z^2 / (n + z^2) at 95 %
    (5, 10, 0.23659, 0.76341),
    (10, 10, 0.72247, 1.0),
])
def test_wilson_interval_known_values(k: int, n: int, low: float, high: float) -> None:
    interval = wilson_interval(k, n, 0.95)
    assert (interval.low, interval.high) == (pytest.approx(low, abs=1e-5),
                                             pytest.approx(high, abs=1e-5))


def test_a_perfect_rate_keeps_an_interval_over_its_recordings() -> None:
    # 48 negative clips of 24 recordings, no false positive: the bootstrap can only draw 1.0,
    # the Wilson interval over 24 recordings cannot claim it
    truth = np.array([0] * 48 + [1] * 48)
    pred = np.array([0] * 48 + [1] * 40 + [0] * 8)
    ids = np.repeat(np.arange(48), 2).astype(str)
    scores = pred.astype(float)
    got = bootstrap_intervals(truth, pred, scores, ids, resamples=200, confidence=0.95, seed=0)
    assert got["specificity"].high == 1.0
    assert got["specificity"].low == pytest.approx(24 / (24 + 1.959964 ** 2), abs=1e-4)
    assert got["precision"].low < 1.0 and got["recall"].low < 40 / 48 < got["recall"].high
    assert got["f1"] == bootstrap_intervals(truth, pred, scores, ids, resamples=200,
                                            confidence=0.95, seed=0)["f1"]   # still bootstrap
    assert rate_intervals(truth, np.zeros(96), ids, 0.95).keys() == {
        "accuracy", "recall", "specificity"}            # no LEAK decision: precision undefined


def test_no_resamples_means_no_intervals() -> None:
    truth, scores, pred = _random(0, 10)
    assert bootstrap_intervals(truth, pred, scores, np.arange(10), resamples=0,
                               confidence=0.95, seed=0) == {}


def test_class_metrics_names_and_values() -> None:
    labels = np.array([0, 0, 1, 2, 2, 2])
    pred = np.array([0, 1, 1, 2, 2, 0])
    got = class_metrics("test", "clip", labels, pred, ("BACKGROUND", "LEAK", "NORMAL"))
    assert got["test/class/LEAK/clip_precision"] == 0.5
    assert got["test/class/LEAK/clip_recall"] == 1.0
    assert got["test/class/NORMAL/clip_recall"] == pytest.approx(2 / 3)
    assert got["test/class/BACKGROUND/clip_support"] == 2.0
    assert got["test/class/NORMAL/clip_f1"] == pytest.approx(f1_score(labels, pred,
                                                                       average=None)[2])


def test_segment_bootstrap_equals_explicit_recording_weights(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments carry their recording: per-recording counts, integer weights and the ranking
    done a few resamples at a time give the percentiles of the explicit (B, items) weights."""
    monkeypatch.setattr(bootstrap, "RANKING_VALUES", 50)       # one resample per ranking step
    rng = np.random.default_rng(4)
    files, per_file = 24, 6
    ids = np.repeat(np.arange(files) // 2, per_file)                  # 12 recordings
    truth = np.repeat(rng.random(files) < 0.5, per_file)
    scores = np.round(0.3 * truth + 0.7 * rng.random(files * per_file), 2)   # with ties
    decision = scores >= 0.5
    got = bootstrap_intervals(truth, decision, scores, ids, resamples=200, confidence=0.9,
                              seed=2)
    weights = recording_weights(ids, 200, np.random.default_rng(2))   # the same draws
    roc, ap = weighted_ranking(scores, truth, weights)
    want = {"f1": weighted_counts(truth, decision, weights).f1, "roc_auc": roc, "pr_auc": ap}
    for name, values in want.items():
        interval = percentile_interval(values, 0.9)
        assert (got[name].low, got[name].high) == (pytest.approx(interval.low),
                                                   pytest.approx(interval.high)), name


def test_bootstrap_without_scores_has_no_ranking_intervals() -> None:
    truth, _, pred = _random(1, 60)
    got = bootstrap_intervals(truth, pred, None, np.arange(60), resamples=100,
                              confidence=0.95, seed=0)
    assert set(got) == {"accuracy", "precision", "recall", "specificity", "f1"}
