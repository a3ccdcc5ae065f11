"""Recording verdicts and the choice of the detector kind (leakpipe/cv/recording_level.py,
leakpipe/cv/report.py): clip scores pooled per recording, the val-chosen recording threshold,
the fused stacker, the selection rule and its nested estimate. Pure functions, small tables."""

from __future__ import annotations

import numpy as np
import pytest

from leakpipe.baselines.logger_stats import recording_means
from leakpipe.config import load_section
from leakpipe.cv.recording_level import fuse, nested_choices, recording_decisions, select_method
from leakpipe.cv.report import OutOfFold, fold_records, summarise
from tests.conftest import REPO

PARAMS = REPO / "params.yaml"
EV = load_section(PARAMS, "evaluate")
DECISION = load_section(PARAMS, "decision")


def test_a_recordings_score_is_the_mean_of_its_clips() -> None:
    clip_scores = np.array([0.2, 0.4, 0.9, 0.7, 0.8, 0.0])
    clip_recording = np.array([0, 0, 1, 1, 1, 2])
    np.testing.assert_allclose(recording_means(clip_scores, clip_recording, 3),
                               [0.3, 0.8, 0.0])


def test_the_recording_threshold_is_chosen_on_val_and_applied_to_test() -> None:
    val = np.array([0.1, 0.2, 0.35, 0.6, 0.7, 0.9])
    truth = np.array([0, 0, 0, 1, 1, 1], dtype=bool)
    out = recording_decisions(val, truth, np.array([0.05, 0.5, 0.95]), EV, DECISION)
    assert out["val_roc_auc"] == 1.0
    assert 0.35 < out["threshold"] <= 0.6                 # separates val perfectly
    assert out["decision"] == [0, int(0.5 >= out["threshold"]), 1]
    flipped = recording_decisions(val, truth, np.array([0.95, 0.5, 0.05]), EV, DECISION)
    assert flipped["threshold"] == out["threshold"]      # test scores reach no choice


@pytest.mark.parametrize(("auc", "margin", "expected"), [
    ({"logger_stats": 0.88, "cnn": 0.55, "fused": 0.87}, 0.01, "logger_stats"),
    ({"logger_stats": 0.80, "cnn": 0.90, "fused": 0.95}, 0.01, "fused"),  # the most complex
    ({"logger_stats": 0.80, "cnn": 0.90, "fused": 0.905}, 0.01, "cnn"),   # fused by too little
    ({"logger_stats": 0.80, "cnn": 0.70, "fused": 0.812}, 0.01, "fused"),  # beats the chosen
    ({"logger_stats": 0.80, "cnn": 0.805}, 0.01, "logger_stats"),        # a tie: the simpler
    ({"logger_stats": 0.80, "cnn": 0.805}, 0.0, "cnn"),
    ({"cnn": 0.7, "random_forest": 0.99}, 0.01, "cnn"),   # baselines are never shipped
    ({"logger_stats": float("nan"), "cnn": 0.6}, 0.01, "cnn"),
    ({"random_forest": 0.9}, 0.01, None),
])
def test_selection_takes_the_simplest_kind_no_other_beats_by_the_margin(
        auc: dict[str, float], margin: float, expected: str | None) -> None:
    assert select_method(auc, margin) == expected


def _fold(val_auc: dict[str, float]) -> dict[str, object]:
    return {"methods": {m: {"recording": {"val_roc_auc": v}} for m, v in val_auc.items()}}


def test_the_nested_choice_reads_each_folds_inner_val_only() -> None:
    folds = [_fold({"cnn": 0.9, "logger_stats": 0.7, "fused": 0.95}),
             _fold({"cnn": 0.6, "logger_stats": 0.8, "fused": 0.8}),
             _fold({"cnn": 0.9, "logger_stats": 0.7, "fused": 0.905})]
    assert nested_choices(folds, 0.01) == ["fused", "logger_stats", "cnn"]


def _oof(scores: dict[str, np.ndarray], truth: np.ndarray, fold: np.ndarray) -> OutOfFold:
    n = len(truth)
    return OutOfFold(fold=fold, recording_id=np.array([f"r{i}" for i in range(n)]),
                     group=np.array([f"s{i // 2}" for i in range(n)]),
                     clip=np.zeros(n, dtype=int), truth=truth, scores=scores,
                     decision={m: v >= 0.5 for m, v in scores.items()})


def test_pooled_selection_picks_the_better_method_and_nested_pools_each_folds_pick() -> None:
    rng = np.random.default_rng(0)
    truth = np.tile([True, False], 20)
    fold = np.repeat([0, 1], 20)
    good = np.where(truth, rng.uniform(0.5, 1.0, 40), rng.uniform(0.0, 0.5, 40))   # AUC 1
    poor = rng.uniform(0.0, 1.0, 40)                                               # ~0.5
    oof = _oof({"cnn": poor, "logger_stats": good}, truth, fold)
    out = summarise(oof, oof, resamples=100, confidence=0.9, seed=0, margin=0.01,
                    nested=["logger_stats", "cnn"])
    assert out["selected"] == "logger_stats"
    nested = out["selected_nested"]
    assert nested["per_fold"] == ["logger_stats", "cnn"]
    # fold 1 scored by the good method, fold 2 by the poor one: in between
    per_fold = nested["recording_roc_auc"]["folds"]
    assert per_fold[0] == 1.0 and per_fold[1] == pytest.approx(
        out["methods"]["cnn"]["recording_roc_auc"]["folds"][1])
    assert "selected_nested" not in out["methods"]
    rows = fold_records(out)              # the folds chart marks the selected kind's points
    assert {(r["method"], r["selected"]) for r in rows} == {("logger_stats", "yes"), ("cnn", "no")}


def test_a_flipped_test_fold_changes_no_nested_choice() -> None:
    """The nested pick of a fold reads only its inner val: flipping the test fold's labels
    (the figures move) leaves every choice as it was."""
    folds = [_fold({"cnn": 0.62, "logger_stats": 0.85, "fused": 0.86}),
             _fold({"cnn": 0.91, "logger_stats": 0.70, "fused": 0.90})]
    choices = nested_choices(folds, 0.01)
    rng = np.random.default_rng(1)
    truth = np.tile([True, False], 10)
    scores = {m: rng.uniform(0, 1, 20) for m in ("cnn", "logger_stats", "fused")}
    fold = np.repeat([0, 1], 10)
    a = summarise(_oof(scores, truth, fold), _oof(scores, truth, fold), resamples=50,
                  confidence=0.9, seed=0, nested=choices)
    b = summarise(_oof(scores, ~truth, fold), _oof(scores, ~truth, fold), resamples=50,
                  confidence=0.9, seed=0, nested=choices)
    assert a["selected_nested"]["per_fold"] == b["selected_nested"]["per_fold"] == choices
    assert a["selected_nested"]["recording_roc_auc"]["mean"] != \
        b["selected_nested"]["recording_roc_auc"]["mean"]


def test_the_stacker_weighs_the_informative_method() -> None:
    rng = np.random.default_rng(2)
    truth = np.tile([True, False], 30)
    informative = np.where(truth, rng.uniform(0.6, 0.95, 60), rng.uniform(0.05, 0.4, 60))
    noise = rng.uniform(0.05, 0.95, 60)
    val_scores, test_scores, weights = fuse([noise, informative], truth,
                                            [noise[:6], informative[:6]], c=1.0)
    assert weights[1] > 5 * abs(weights[0])
    assert ((val_scores >= 0.5) == truth).mean() > 0.9
    one_class = fuse([noise[:4], informative[:4]], np.ones(4, dtype=bool),
                     [noise[:2], informative[:2]], c=1.0)
    assert one_class[2] == [0.5, 0.5, 0.0]               # nothing to weigh: the mean logit


def test_a_fitted_stacker_scores_as_the_logistic_regression_it_holds() -> None:
    """What ship stores in a fused detector (``fit_stacker``) gives cv's fused scores, which are
    the logistic regression's own probabilities on the clipped logits."""
    from sklearn.linear_model import LogisticRegression

    from leakpipe.cv.recording_level import fit_stacker
    from leakpipe.decision.stacking import PROB_EPS, logit

    rng = np.random.default_rng(3)
    truth = np.tile([True, False], 15)
    cnn = np.where(truth, rng.uniform(0.4, 1.0, 30), rng.uniform(0.0, 0.6, 30))
    stats = np.where(truth, rng.uniform(0.5, 1.0, 30), rng.uniform(0.0, 0.5, 30))
    stats[0] = 1.0                                       # saturated: clipped to 1 - eps
    test = [rng.uniform(0, 1, 7), rng.uniform(0, 1, 7)]
    stacker = fit_stacker([cnn, stats], truth, 0.5, ("cnn", "logger_stats"))
    _, fused_test, weights = fuse([cnn, stats], truth, test, c=0.5)
    assert weights == [*stacker.weights, stacker.bias] and stacker.names == ("cnn", "logger_stats")
    x = np.stack([logit(cnn), logit(stats)], axis=1)
    reference = LogisticRegression(C=0.5, max_iter=1000).fit(x, truth.astype(int))
    x_test = np.stack([logit(t) for t in test], axis=1)
    np.testing.assert_allclose(fused_test, reference.predict_proba(x_test)[:, 1], atol=1e-12)
    np.testing.assert_allclose(stacker.prob(x_test), fused_test, atol=1e-12)
    assert logit(1.0) == pytest.approx(np.log((1 - PROB_EPS) / PROB_EPS))


def test_fused_val_figure_for_nested_selection_is_scored_site_out_of_fold() -> None:
    """A stacker fitted on val would grade itself on val: each val site's scores come from a
    stacker fitted on the other val sites."""
    from leakpipe.cv.recording_level import fit_stacker, site_out_of_fold
    from leakpipe.decision.stacking import logit as to_logit

    rng = np.random.default_rng(3)
    group = np.repeat(["a", "b", "c", "d", "e", "f"], 3)
    truth = np.repeat([True, False, True, False, True, False], 3)
    parts = [np.clip(0.5 + 0.3 * (truth - 0.5) + rng.normal(0, 0.2, 18), 0.01, 0.99)
             for _ in range(2)]
    held = site_out_of_fold(parts, truth, group, 1.0)
    for site in "abcdef":
        rows = group == site
        stacker = fit_stacker([p[~rows] for p in parts], truth[~rows], 1.0, ["0", "1"])
        expected = stacker.prob(to_logit(np.stack([p[rows] for p in parts], axis=1)))
        np.testing.assert_allclose(held[rows], expected, rtol=1e-12)
    in_sample = fit_stacker(parts, truth, 1.0, ["0", "1"]).prob(
        to_logit(np.stack(parts, axis=1)))
    assert not np.allclose(held, in_sample)
