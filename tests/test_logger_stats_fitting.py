"""How logger_stats is fitted (leakpipe.baselines.logger_stats.fit_and_select): C by grouped
inner CV over train + val, refitted on both, the threshold on out-of-fold scores; val scores
that no model which saw them produced; the plain route with inner_folds 1."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from leakpipe.baselines import logger_stats as ls
from leakpipe.config import load_section
from leakpipe.errors import DataError
from leakpipe.evaluate.figures import ranking_metrics

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
BASELINES = load_section(PARAMS, "baselines")
EVALUATE = load_section(PARAMS, "evaluate")
DECISION = load_section(PARAMS, "decision")
NAMES = ("level_p10", "level_p50", "level_spread", "noise_a", "noise_b")


def table(name: str, sites: int, seed: int, leak_sites: int | None = None,
          per_site: int = 2) -> ls.RecordingTable:
    """Recordings of ``sites`` single-class sites: leaks are louder in their quiet moments
    (level_p10) and steadier (a smaller spread); two columns of noise."""
    rng = np.random.default_rng(seed)
    leak_sites = sites // 2 if leak_sites is None else leak_sites
    group = np.repeat([f"{name}-{s}" for s in range(sites)], per_site)
    truth = np.repeat(np.arange(sites) < leak_sites, per_site)
    n = len(truth)
    stats = np.stack([-60 + 8 * truth + rng.normal(0, 3, n), -50 + 3 * truth + rng.normal(0, 3, n),
                      12 - 5 * truth + rng.normal(0, 2, n), rng.normal(0, 1, n),
                      rng.normal(0, 1, n)], axis=1).astype(np.float32)
    ids = np.asarray([f"{name}-{i}" for i in range(n)])
    return ls.RecordingTable(path=Path(f"{name}.h5"), recording_id=ids, group=group,
                             truth=truth, stats=stats, names=NAMES, clip_recording=np.arange(n))


def config(**change: object) -> object:
    return dataclasses.replace(BASELINES.logger_stats, **change)


def test_inner_cv_refits_on_train_and_val_and_keeps_val_scores_out_of_fold() -> None:
    train, val = table("train", 16, 0), table("val", 4, 1)
    cfg = config()
    fit = ls.fit_and_select(train, val, cfg, EVALUATE, DECISION)
    assert fit.c in cfg.C
    assert len(fit.pooled_scores) == len(train) + len(val)
    np.testing.assert_array_equal(fit.val_scores, fit.pooled_scores[len(train):])
    # out of fold: rebuilt from the same inner folds, each scored by a model fitted without it
    x = np.concatenate([train.stats, val.stats])
    truth = np.concatenate([train.truth, val.truth])
    fold = ls.inner_folds(truth, np.concatenate([train.group, val.group]), cfg.inner_folds,
                          cfg.seed)
    assert fold is not None
    np.testing.assert_allclose(fit.pooled_scores,
                               ls.out_of_fold(x, truth, fold, fit.c, list(NAMES)), rtol=1e-6)
    # the kept model is refitted on every train and val recording, not on train alone
    refit = ls.fit_net(x, truth, fit.c, list(NAMES))
    train_only = ls.fit_net(train.stats, train.truth, fit.c, list(NAMES))
    np.testing.assert_allclose(fit.net.linear.weight.detach().numpy(),
                               refit.linear.weight.detach().numpy(), rtol=1e-5)
    assert not np.allclose(fit.net.linear.weight.detach().numpy(),
                           train_only.linear.weight.detach().numpy())
    # separable evidence: leaks ranked above no-leaks out of fold
    assert ranking_metrics(truth, fit.pooled_scores)["roc_auc"] > 0.9


def test_inner_folds_keep_every_site_in_one_fold_and_both_classes_in_training() -> None:
    t = table("pool", 20, 2)
    fold = ls.inner_folds(t.truth, t.group, 4, 0)
    assert fold is not None and set(fold.tolist()) == {0, 1, 2, 3}
    for site in set(t.group.tolist()):
        assert len(set(fold[t.group == site].tolist())) == 1
    for f in range(4):
        assert set(t.truth[fold != f].tolist()) == {False, True}
    # a class with three sites: at most three folds
    few = table("few", 12, 3, leak_sites=3)
    assert set(ls.inner_folds(few.truth, few.group, 4, 0).tolist()) == {0, 1, 2}


def test_too_few_sites_of_a_class_is_one_error_naming_the_files() -> None:
    train, val = table("train", 6, 0, leak_sites=1), table("val", 2, 1, leak_sites=0)
    with pytest.raises(DataError, match=r"train\.h5, val\.h5: .*two sites of each class"):
        ls.fit_and_select(train, val, config(), EVALUATE, DECISION)


def test_a_tie_keeps_the_stronger_regularisation() -> None:
    train, val = table("train", 16, 0), table("val", 4, 1)
    train.stats[:, 0] = np.where(train.truth, 100.0, -100.0)   # every C ranks perfectly
    val.stats[:, 0] = np.where(val.truth, 100.0, -100.0)
    fit = ls.fit_and_select(train, val, config(C=(1.0, 0.01, 0.1)), EVALUATE, DECISION)
    assert fit.c == 0.01
    assert [row["C"] for row in fit.grid] == [0.01, 0.1, 1.0]


def test_inner_folds_one_is_the_plain_route_fit_on_train_choose_on_val() -> None:
    train, val = table("train", 16, 0), table("val", 6, 1)
    fit = ls.fit_and_select(train, val, config(inner_folds=1), EVALUATE, DECISION)
    plain = ls.fit_net(train.stats, train.truth, fit.c, list(NAMES))
    np.testing.assert_allclose(fit.val_scores, ls.leak_probability(plain, val.stats),
                               rtol=1e-6)
    np.testing.assert_array_equal(fit.pooled_truth, val.truth)


def test_cv_logger_stats_decides_at_the_pooled_threshold_and_reports_its_pooled_inner_auc(
        ) -> None:
    """In a cv fold: the recording threshold is the one chosen on the out-of-fold scores of
    train + val, and the inner figure nested selection reads is their ROC-AUC (not the val
    handful's), while val_scores stay the val recordings' own out-of-fold scores."""
    from leakpipe.cv.methods import run_logger_stats
    from leakpipe.cv.stage import load_settings

    tables = {"train": table("train", 16, 0), "val": table("val", 4, 1),
              "test": table("test", 6, 2)}
    result = run_logger_stats(tables, load_settings(PARAMS, None))
    fit = ls.fit_and_select(tables["train"], tables["val"], BASELINES.logger_stats, EVALUATE,
                            DECISION)
    rec = result.recording
    assert rec is not None and rec["threshold"] == fit.point.threshold == result.threshold
    assert rec["val_roc_auc"] == ranking_metrics(fit.pooled_truth, fit.pooled_scores)["roc_auc"]
    np.testing.assert_allclose(rec["val_scores"], fit.val_scores)
    assert len(rec["scores"]) == len(tables["test"])
