"""Grouped cross-validation (`leakpipe cv`, stage `crossval`): real HDF5 folds, real fit(),
real baselines, real WAV builds, a real MLflow SQLite store and a real SIGKILL."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest
import soundfile as sf
import yaml
from mlflow.tracking import MlflowClient

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.constants import H5_LABELS, KNOWN_CLASSES, LEAK_CLASS
from leakpipe.cv.data import pool_recordings, write_fold
from leakpipe.cv.figure import folds_figure
from leakpipe.cv.folds import ROLES, make_folds
from leakpipe.cv.methods import Settings, run_fold_methods
from leakpipe.cv.report import OutOfFold, summarise
from leakpipe.errors import DataError
from tests.helpers_detector import (
    copied_store,
    one_torch_thread,
    restore_logging,
    write_plan,
)
from tests.helpers_h5 import write_splits

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
RATE = 4096
METHODS = ("cnn", "logger_stats", "fused", "min_level", "band_min_level", "random_forest", "svm",
           "xgboost", "level_logreg")

torch_thread = pytest.fixture(one_torch_thread)
logging_restored = pytest.fixture(restore_logging)


# -- folds (pure) -------------------------------------------------------------------------------

def _dataset(n_sites: int, per_site: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    site_class = rng.choice(["LEAK", "NOLEAK"], n_sites)
    site_class[:2] = ["LEAK", "NOLEAK"]
    groups = np.repeat([f"s{i}" for i in range(n_sites)], per_site)
    labels = np.repeat(site_class, per_site)
    return labels, groups


@pytest.mark.parametrize(("n_sites", "k", "seed"), [(30, 5, 0), (30, 5, 1), (17, 3, 4),
                                                    (40, 10, 2)])
def test_every_group_is_in_exactly_one_test_fold_and_roles_never_share_a_group(
        n_sites: int, k: int, seed: int) -> None:
    labels, groups = _dataset(n_sites, 3, seed)
    folds = make_folds(labels, groups, k, 0.2, seed)
    tested = np.concatenate([f.test for f in folds])
    assert sorted(tested) == list(range(len(labels)))          # every recording tested once
    for fold in folds:
        sites = [set(groups[fold.rows(r)]) for r in ROLES]
        assert not (sites[0] & sites[1] or sites[0] & sites[2] or sites[1] & sites[2])
        assert len(np.concatenate([fold.rows(r) for r in ROLES])) == len(labels)
    leak_share = [np.mean(labels[f.test] == LEAK_CLASS) for f in folds]
    assert max(leak_share) - min(leak_share) < 0.5             # stratified, as groups allow


def test_too_few_groups_for_the_folds_is_a_data_error() -> None:
    labels, groups = _dataset(4, 2, 0)
    with pytest.raises(DataError, match="4 groups .* cannot fill 5 folds"):
        make_folds(labels, groups, 5, 0.2, 0)


def test_a_fold_part_without_leak_is_refused() -> None:
    labels = np.array(["LEAK", "LEAK", "NOLEAK", "NOLEAK", "NOLEAK", "NOLEAK"])
    groups = np.array(["a", "a", "b", "c", "d", "e"])
    with pytest.raises(DataError, match="holds no LEAK recordings"):
        make_folds(labels, groups, 2, 0.3, 0)


# -- figures (pure) -----------------------------------------------------------------------------

def test_pooled_figures_and_the_site_bootstrap() -> None:
    truth = np.array([1, 1, 0, 0, 1, 0, 1, 0], dtype=bool)
    good = np.array([0.9, 0.8, 0.1, 0.2, 0.7, 0.3, 0.6, 0.4])
    oof = OutOfFold(fold=np.array([0, 0, 0, 0, 1, 1, 1, 1]),
                    recording_id=np.array([f"r{i}" for i in range(8)]),
                    group=np.array(["a", "a", "b", "b", "c", "d", "e", "f"]),
                    clip=np.zeros(8, dtype=int), truth=truth,
                    scores={"cnn": good, "level_logreg": 1.0 - good},
                    decision={"cnn": good >= 0.5, "level_logreg": good < 0.5})
    out = summarise(oof, oof, resamples=200, confidence=0.9, seed=0)
    cnn, level = out["methods"]["cnn"], out["methods"]["level_logreg"]
    for level_name in ("recording", "clip"):
        assert cnn[f"{level_name}_roc_auc"]["mean"] == 1.0
        assert level[f"{level_name}_roc_auc"]["mean"] == 0.0
        assert cnn[f"{level_name}_f1"]["mean"] == 1.0
        assert cnn[f"{level_name}_balanced_accuracy"]["mean"] == 1.0
    assert level["recording_sensitivity"]["mean"] == 0.0
    assert level["recording_specificity"]["mean"] == 0.0
    assert cnn["recording_roc_auc"]["folds"] == [1.0, 1.0]
    assert list(cnn)[0] == "recording_roc_auc"                   # recording figures first
    assert out["paired"]["minus"] == "level_logreg"
    paired = out["paired"]["recording_roc_auc"]
    assert paired["mean"] == 1.0 == paired["ci_low"]
    assert out["sites"] == 6 and out["recordings"] == 8 and out["folds"] == 2
    assert out["selected"] == "cnn"                 # the only detector kind among the methods
    figure = folds_figure(out, [])                  # the winner marked where people look
    ticks = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    assert ticks == ["cnn\n(selected)", "level_logreg"]
    assert "selected: cnn" in figure.axes[0].get_title()


def test_the_paired_rival_is_a_baseline_never_the_cnns_own_stack_or_the_nested_picks() -> None:
    from leakpipe.cv.report import NESTED, best_baseline
    pooled = {"cnn": {"roc_auc": 0.80}, "fused": {"roc_auc": 0.90}, NESTED: {"roc_auc": 0.88},
              "svm": {"roc_auc": 0.70}, "random_forest": {"roc_auc": 0.75},
              "xgboost": {"roc_auc": float("nan")}}
    assert best_baseline(pooled) == "random_forest"


# -- one fold's methods on real files ------------------------------------------------------------

def _small_grids(params: dict) -> None:
    """One small combination per baseline: the selection machinery runs, in a fraction of the
    default grids' time."""
    params["baselines"].update(
        random_forest={"n_estimators": [20], "max_depth": [None, 4], "min_samples_leaf": [1]},
        svm={"C": [1.0], "gamma": [0.1, 1.0]},
        xgboost={"n_estimators": [20], "max_depth": [3], "learning_rate": [0.2]},
        level_logreg={"C": [1.0]})


def _settings(tmp: Path) -> Settings:
    params = yaml.safe_load(PARAMS.read_text())
    _small_grids(params)
    params["runtime"]["device"] = "cpu"
    params["train"].update(batch_size=64)
    params["cv"].update(epochs=1, train_fraction=1.0)
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    plan = {"placement": "ram", "dtype": "float32", "stream": {"buffer_chunks": 1},
            "params": dataclasses.asdict(load_section(PARAMS, "preload"))}
    from leakpipe.cv.stage import load_settings
    return load_settings(path, plan)


def test_the_test_fold_labels_reach_no_choice_of_any_method(tmp_path: Path,
                                                           torch_thread: None) -> None:
    """Flip every label of the test fold: every method's threshold, hyper-parameters, best
    epoch, scores and decisions stay the same (only the figures computed from them change)."""
    splits = write_splits(tmp_path / "data")
    recordings = pool_recordings([splits[s] for s in ("train", "val", "test")])
    fold = make_folds(recordings.label_names, recordings.group, 3, 0.3, 0)[0]
    files = write_fold(recordings, {r: fold.rows(r) for r in ROLES}, tmp_path / "a")
    flipped = tmp_path / "b"
    flipped.mkdir()
    for path in files.values():
        shutil.copy(path, flipped / path.name)
    with h5py.File(flipped / "test.h5", "r+") as h5:
        labels = h5[H5_LABELS][:]
        leak = KNOWN_CLASSES.index(LEAK_CLASS)
        h5[H5_LABELS][:] = np.where(labels == leak, 0, leak)       # LEAK <-> not LEAK
    settings = _settings(tmp_path)
    first = run_fold_methods(files, settings, tmp_path / "fit-a")
    second = run_fold_methods({r: flipped / f"{r}.h5" for r in ROLES}, settings,
                              tmp_path / "fit-b")
    assert [m.name for m in first] == list(METHODS)
    for a, b in zip(first, second, strict=True):
        assert a.threshold == b.threshold and a.info == b.info, a.name
        np.testing.assert_array_equal(a.scores, b.scores)
        np.testing.assert_array_equal(a.decision, b.decision)
        assert a.recording == b.recording, a.name    # recording threshold, val AUC, verdicts


# -- the command on a manifest source: kill between folds, resume ---------------------------------

def _recordings(root: Path) -> Path:
    """12 sites, 2 recordings each: LEAK sites hiss louder than the others, with overlap."""
    rng = np.random.default_rng(0)
    rows = ["path,class,group"]
    for site in range(12):
        cls = "LEAK" if site % 2 else "NOLEAK"
        for k in range(2):
            level = (0.08 if cls == "LEAK" else 0.03) * rng.uniform(0.5, 2.0)
            path = root / "wav" / f"site{site}_{k}.wav"
            path.parent.mkdir(parents=True, exist_ok=True)
            sf.write(path, (level * rng.standard_normal(2 * RATE)).astype(np.float32), RATE,
                     subtype="FLOAT")
            rows.append(f"{path},{cls},site{site}")
    manifest = root / "manifest.csv"
    manifest.write_text("\n".join(rows) + "\n")
    return manifest


def _small_params(root: Path) -> Path:
    params = yaml.safe_load(PARAMS.read_text())
    _small_grids(params)
    params["build"].update(sample_rate=RATE, fmax=2048.0, clip_s=1.0, short_window=256,
                           short_hop=128, n_fft=256, hop_length=256, n_mels=16, workers=1,
                           clips_per_recording=2)
    params["runtime"]["device"] = "cpu"
    params["train"].update(batch_size=64)
    params["cv"].update(epochs=1, train_fraction=1.0, bootstrap_resamples=100,
                        val_fraction=0.25, source_repeats=1)   # draws: tests/test_cv_draws.py
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "MLFLOW_TRACKING_URI": copied_store(tmp / "mlruns"),
            "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


@pytest.fixture
def source_run(tmp_path: Path) -> Iterator[tuple[Path, list[str], dict[str, str]]]:
    manifest = _recordings(tmp_path)
    params = _small_params(tmp_path)
    cmd = [sys.executable, "-m", "leakpipe.cli", "cv", "--source", str(manifest),
           "--folds", "3", "--params", str(params), "--out", str(tmp_path / "out"),
           "--no-progress"]
    yield tmp_path, cmd, _env(tmp_path)


@pytest.mark.slow
def test_cv_on_a_manifest_killed_between_folds_resumes_after_the_finished_fold(
        source_run: tuple[Path, list[str], dict[str, str]]) -> None:
    root, cmd, env = source_run
    before = PARAMS.read_bytes()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    first = root / "out" / "work" / "fold-01" / "result.json"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if first.is_file():
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before fold 1 was recorded"
    assert not (root / "out" / "cv.json").exists()
    stamp = first.stat().st_mtime_ns
    rerun = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming in" in rerun.stderr and "fold-01" in rerun.stderr
    assert "fold 1/3:" not in rerun.stderr and "fold 2/3:" in rerun.stderr
    assert first.stat().st_mtime_ns == stamp
    summary = json.loads((root / "out" / "cv.json").read_text())
    assert summary["folds"] == 3 and summary["sites"] == 12 and summary["recordings"] == 24
    for method in METHODS:
        for figure in ("recording_roc_auc", "recording_f1", "recording_balanced_accuracy",
                       "clip_roc_auc", "clip_f1", "clip_balanced_accuracy",
                       "clip_sensitivity", "clip_specificity"):
            entry = summary["methods"][method][figure]
            assert set(entry) >= {"mean", "ci_low", "ci_high", "folds"}
            assert len(entry["folds"]) == 3
    assert summary["methods"]["level_logreg"]["clip_roc_auc"]["mean"] > 0.7  # loudness is the cue
    # whole-recording level statistics see the same loudness
    assert summary["methods"]["logger_stats"]["recording_roc_auc"]["mean"] > 0.7
    assert summary["paired"]["minus"] in METHODS[1:]
    assert summary["selected"] in ("cnn", "logger_stats", "fused")
    assert len(summary["selected_nested"]["per_fold"]) == 3
    assert set(summary["selected_nested"]["recording_roc_auc"]) == {"mean", "ci_low", "ci_high",
                                                                    "folds"}
    recs = (root / "out" / "predictions_recordings.csv").read_text().splitlines()
    assert len(recs) == 1 + 24 and recs[0].startswith("fold,recording_id,group,leak")
    rows = (root / "out" / "predictions.csv").read_text().splitlines()
    assert len(rows) == 1 + 24 * 2 and rows[0].startswith("fold,recording_id,clip,group,leak")
    assert (root / "out" / "plots" / "folds.png").stat().st_size > 0
    assert PARAMS.read_bytes() == before
    # its MLflow run says what it selected and from which source, named apart from the stage's
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags
                 and r.data.tags.get(tracking.TAG_STAGE) == "crossval"]
    tags = parent.data.tags
    assert tags[tracking.TAG_SELECTED_KIND] == summary["selected"]
    assert tags[tracking.TAG_CV_SOURCE] == str((root / "manifest.csv").resolve())
    assert tags["mlflow.runName"] == "cv manifest.csv"
    assert f"Selected kind: **{summary['selected']}**" in tags["mlflow.note.content"]
    # the recording figures (the primary ones) in the first chart section, clip ones after
    names = set(parent.data.metrics)
    assert "cv/logger_stats/recording_roc_auc" in names and "cv_clip/cnn/clip_f1" in names
    assert not [n for n in names if n.startswith("cv/") and "/clip_" in n]
    assert sorted(n.split("/")[0] for n in names if "/" in n)[0] == "cv"


def test_source_without_out_and_a_foreign_work_folder_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], logging_restored: None) -> None:
    assert main(["cv", "--source", str(tmp_path), "--params", str(PARAMS)]) == 2
    assert "--source needs --out" in capsys.readouterr().err
    splits = write_splits(tmp_path / "data")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code = main(["cv", "--params", str(_small_params(tmp_path)), "--data-dir",
                 str(splits["train"].parent), "--unvalidated", "--work", str(mine),
                 "--metrics", str(tmp_path / "cv.json"),
                 "--plan", str(write_plan(tmp_path / "plan.json")),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 3 and "not a cross-validation work folder" in err, err
    assert (mine / "notes.txt").read_text() == "keep me"
    assert not (tmp_path / "cv.json").exists()


def test_a_work_folder_of_other_settings_loses_its_folds_and_nothing_else(
        tmp_path: Path) -> None:
    from leakpipe.cv.stage import _open_work

    work = tmp_path / "work"
    _open_work(work, {"settings": 1})
    (work / "fold-01").mkdir()
    (work / "fold-01" / "result.json").write_text("{}")
    (work / "preload.json").write_text("{}")
    (work / "notes.txt").write_text("mine")
    _open_work(work, {"settings": 1})                       # same inputs: resumes, keeps all
    assert (work / "fold-01" / "result.json").is_file()
    _open_work(work, {"settings": 2})                       # other inputs: the folds go
    assert not (work / "fold-01").exists() and not (work / "preload.json").exists()
    assert (work / "notes.txt").read_text() == "mine"
