"""Repeated draws of grouped CV (`cv.repeats`, `leakpipe cv --repeats`) and each method against
the logger's rule (``paired_vs_rule``): the pure pieces on constructed tables, and a real
two-draw `leakpipe cv --source` run (real WAVs, real builds, real folds, real MLflow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from leakpipe.cv.draws import draw_figures, resampled_means, with_draws
from leakpipe.cv.folds import make_folds
from leakpipe.cv.report import OutOfFold
from tests.test_cv import _dataset, _env, _recordings, _small_params


@pytest.mark.parametrize(("n_sites", "k"), [(30, 5), (17, 3)])
def test_each_draw_puts_every_site_in_one_test_fold_and_draws_differ(n_sites: int,
                                                                    k: int) -> None:
    labels, groups = _dataset(n_sites, 2, 3)
    assignments = []
    for d in range(3):                          # draw d: fold seed cv.seed + d
        folds = make_folds(labels, groups, k, 0.25, 7 + d)
        tested = np.concatenate([groups[f.test] for f in folds])
        assert sorted(set(tested)) == sorted(set(groups))
        assert len(tested) == len(groups)       # every recording tested once in a draw
        assignments.append({g: f.index for f in folds for g in set(groups[f.test])})
    assert assignments[0] != assignments[1] != assignments[2]


def _table(truth: np.ndarray, group: np.ndarray, scores: dict[str, np.ndarray],
           order: np.ndarray) -> OutOfFold:
    """One draw's recordings table (its own row order, as a draw's folds give it)."""
    return OutOfFold(fold=np.zeros(len(order), int), recording_id=np.arange(len(truth))[order],
                     group=group[order], clip=np.zeros(len(order), int), truth=truth[order],
                     scores={m: s[order] for m, s in scores.items()},
                     decision={m: s[order] >= 0.5 for m, s in scores.items()})


def _world(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    group = np.repeat([f"s{i}" for i in range(20)], 3)
    truth = np.repeat(np.arange(20) % 2 == 1, 3)
    return truth, group, rng.uniform(size=len(truth))


def test_a_method_that_clearly_beats_the_rule_has_an_interval_above_zero() -> None:
    truth, group, noise = _world(0)
    scores = {"min_level": noise, "band_min_level": 0.5 * noise,       # rules: chance
              "logger_stats": 0.7 * truth + 0.3 * noise,              # learned: clearly better
              "svm": noise.copy()}                                     # the rule's own ranking
    rng = np.random.default_rng(1)
    tables = [_table(truth, group, scores, rng.permutation(len(truth))) for _ in range(3)]
    out = draw_figures(tables, resamples=400, confidence=0.95, seed=0)
    assert out["repeats"] == 3
    versus = out["paired_vs_rule"]
    assert versus["rule"] in ("min_level", "band_min_level")
    beats = versus["methods"]["logger_stats"]
    assert beats["mean"] > 0.3 and beats["ci_low"] > 0.0
    same = versus["methods"]["svm"]               # ranks as the rule does: no difference at all
    assert same["mean"] == pytest.approx(0.0, abs=1e-12)
    assert same["ci_low"] == pytest.approx(0.0, abs=1e-12)
    assert same["ci_high"] == pytest.approx(0.0, abs=1e-12)
    entry = out["methods"]["logger_stats"]
    assert len(entry["draws"]) == 3 and entry["draws_ci_low"] <= entry["draws_mean"]


def test_one_resample_weighs_every_draw_alike() -> None:
    """Reordering a draw's rows (another fold assignment of the same recordings, the same
    scores) changes no resampled figure: the site draws are shared, not per table."""
    truth, group, noise = _world(2)
    scores = {"min_level": noise, "cnn": 0.5 * truth + 0.5 * noise}
    a = _table(truth, group, scores, np.arange(len(truth)))
    b = _table(truth, group, scores, np.random.default_rng(3).permutation(len(truth)))
    one = resampled_means([a], ("min_level", "cnn"), resamples=50, seed=4)
    two = resampled_means([a, b], ("min_level", "cnn"), resamples=50, seed=4)
    for m in one:
        np.testing.assert_allclose(one[m], two[m], rtol=0, atol=1e-12)


def test_selection_reads_the_mean_over_draws() -> None:
    """A kind ahead in the first draw but behind on average is not selected."""
    methods = {m: {"recording_roc_auc": {"mean": v}} for m, v in
               (("logger_stats", 0.80), ("cnn", 0.85), ("fused", 0.86))}
    drawn = {"repeats": 3, "methods": {
        "logger_stats": {"draws": [0.80, 0.84, 0.85], "draws_mean": 0.83},
        "cnn": {"draws": [0.85, 0.78, 0.77], "draws_mean": 0.80},
        "fused": {"draws": [0.86, 0.80, 0.80], "draws_mean": 0.82}}}
    out = with_draws({"selected": "fused", "methods": methods}, drawn, margin=0.01)
    assert out["selected"] == "logger_stats" and out["repeats"] == 3
    assert out["methods"]["cnn"]["recording_roc_auc"]["draws"] == [0.85, 0.78, 0.77]
    assert out["methods"]["cnn"]["recording_roc_auc"]["mean"] == 0.85   # the first draw's


def test_cv_on_a_source_draws_the_folds_twice(tmp_path: Path) -> None:
    manifest = _recordings(tmp_path)
    params = _small_params(tmp_path)
    raw = yaml.safe_load(params.read_text())
    raw["cv"]["methods"] = ["logger_stats", "min_level", "band_min_level", "level_logreg"]
    raw["cv"]["source_repeats"] = 2
    params.write_text(yaml.safe_dump(raw))
    cmd = [sys.executable, "-m", "leakpipe.cli", "cv", "--source", str(manifest), "--folds", "3",
           "--params", str(params), "--out", str(tmp_path / "out"), "--no-progress"]
    env = _env(tmp_path)
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=False)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "out" / "cv.json").read_text())
    assert summary["repeats"] == 2
    for m in raw["cv"]["methods"]:
        entry = summary["methods"][m]["recording_roc_auc"]
        assert len(entry["draws"]) == 2
        assert entry["draws"][0] == pytest.approx(entry["mean"], abs=1e-12)   # draw 1 pooled
        assert entry["draws_mean"] == pytest.approx(np.mean(entry["draws"]), abs=1e-12)
        assert entry["draws_ci_low"] <= entry["draws_mean"] <= entry["draws_ci_high"]
    versus = summary["paired_vs_rule"]
    assert versus["rule"] in ("min_level", "band_min_level")
    assert set(versus["methods"]) == set(raw["cv"]["methods"]) - {versus["rule"]}
    work = tmp_path / "out" / "work"
    assert len(list(work.glob("fold-*/result.json"))) == 3
    assert len(list(work.glob("draw-02/fold-*/result.json"))) == 3
    assert "x 2 draws (their mean)" in run.stdout
    # a rerun with one draw more keeps both draws and runs only the third
    stamps = {p: p.stat().st_mtime_ns for p in work.glob("**/fold-*/result.json")}
    rerun = subprocess.run([*cmd, "--repeats", "3"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads((tmp_path / "out" / "cv.json").read_text())["repeats"] == 3
    assert "resuming in" in rerun.stderr and "draw-02/fold-03" in rerun.stderr
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert len(list(work.glob("draw-03/fold-*/result.json"))) == 3
