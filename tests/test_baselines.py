"""Stage `baselines`: MFCC features on small tables, selection on val, outputs and MLflow runs."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from scipy.fft import dct

from leakpipe import tracking
from leakpipe.baselines.comparison import compare_models
from leakpipe.baselines.data import read_features
from leakpipe.baselines.features import clip_level, feature_names, mfcc, mfcc_summary
from leakpipe.cli import main
from leakpipe.config import ConfigError, load_section
from leakpipe.constants import H5_LABELS, H5_MEL, KNOWN_CLASSES
from tests.conftest import PARAMS
from tests.helpers_detector import copied_store, restore_logging
from tests.helpers_h5 import SMALL_FEATURES, validate_into, write_splits

_keep_logging = pytest.fixture(autouse=True)(restore_logging)

LEAK = KNOWN_CLASSES.index("LEAK")
N_MELS = SMALL_FEATURES.n_mels
TILT_DB = 25.0   # LEAK clips: a spectral tilt of +-TILT_DB across the mel bands, level unchanged
SMALL_GRIDS = {  # one or two combinations per model keep the stage at about a second
    "random_forest": {"n_estimators": [50], "max_depth": [None], "min_samples_leaf": [1, 4]},
    "svm": {"C": [0.1, 10.0], "gamma": [0.1]},
    "xgboost": {"n_estimators": [50], "max_depth": [3], "learning_rate": [0.2]},
    "level_logreg": {"C": [1.0]},
}
# Trained figures move with the CPU's float kernels, so the tests bound them with room. Measured
# here: every MFCC model F1 and ROC-AUC 1.0 on separable clips; with shuffled train labels
# ROC-AUC 0.35-0.46 and F1 0.29-0.34 (calling every clip LEAK gives 0.33; chance ROC-AUC on
# 16 LEAK test clips of 80 spreads about 0.08, one standard deviation).
LEARNED_F1, LEARNED_ROC_AUC = 0.9, 0.95
UNLEARNED_F1, UNLEARNED_ROC_AUC = 0.6, 0.7


# -- features -----------------------------------------------------------------------------------

def test_dct_of_a_constant_log_mel_is_c0_only() -> None:
    frames = np.full((N_MELS, 3), -40.0)                            # (M, T)
    coeffs = mfcc(frames, 8)
    np.testing.assert_allclose(coeffs[0], -40.0 * np.sqrt(N_MELS))  # ortho: c0 = sqrt(M) mean
    np.testing.assert_allclose(coeffs[1:], 0.0, atol=1e-9)


def test_mfcc_is_scipy_dct_ii_ortho_and_librosa_mfcc() -> None:
    import librosa

    log_mel = np.random.default_rng(0).uniform(-100, 40, (2, 3, N_MELS, 4))  # (..., M, T)
    want = dct(log_mel, type=2, norm="ortho", axis=-2)[..., :5, :]
    np.testing.assert_allclose(mfcc(log_mel, 5), want)
    np.testing.assert_allclose(mfcc(log_mel, 5), librosa.feature.mfcc(S=log_mel, n_mfcc=5),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [0, N_MELS + 1])
def test_mfcc_count_must_fit_the_mel_bands(n: int) -> None:
    with pytest.raises(ValueError, match="mel bands"):
        mfcc(np.zeros((N_MELS, 1)), n)


def test_summary_is_mean_and_std_over_every_short_segment_frame() -> None:
    # one clip, 2 long x 1 short x 2 frames: levels -10, -20, -30, -40 dB, flat over the mels
    clip = np.array([-10.0, -20.0, -30.0, -40.0]).reshape(1, 2, 1, 1, 2)
    clip = np.broadcast_to(clip, (1, 2, 1, N_MELS, 2))             # (F, L, S, M, T)
    root = np.sqrt(N_MELS)
    mean = mfcc_summary(clip, 3, "mean")
    np.testing.assert_allclose(mean, [[-25.0 * root, 0.0, 0.0]], atol=1e-9)
    both = mfcc_summary(clip, 3, "mean_std")
    np.testing.assert_allclose(both, [[-25.0 * root, 0, 0, np.sqrt(125.0) * root, 0, 0]],
                               atol=1e-9)
    assert feature_names(3, "mean_std")[3] == "mfcc0_std"
    np.testing.assert_allclose(clip_level(clip), [[-25.0]])        # the mean dB of the clip


def test_level_is_c0_mean_over_root_mel_count() -> None:
    clips = np.random.default_rng(1).uniform(-100, 40, (3, *SMALL_FEATURES.segment_shape))
    np.testing.assert_allclose(mfcc_summary(clips, 1, "mean")[:, 0] / np.sqrt(N_MELS),
                               clip_level(clips)[:, 0])


# -- config -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mutate", "message"), [
    (lambda b: b["svm"].update(C=[]), "baselines.svm.C: must list at least one value"),
    (lambda b: b["xgboost"].update(max_depth=[0]), "baselines.xgboost.max_depth: values must"),
    (lambda b: b.update(models=["cnn"]), "baselines.models[0]: expected one of"),
    (lambda b: b.update(models=["svm", "svm"]), "baselines.models: must list"),
    (lambda b: b.update(summary="median"), "baselines.summary: expected one of"),
])
def test_bad_baselines_params_name_the_key(tmp_path: Path, mutate, message: str) -> None:
    raw = yaml.safe_load(PARAMS.read_text())
    mutate(raw["baselines"])
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_section(path, "baselines")


# -- the stage on tiny HDF5 splits --------------------------------------------------------------

def _inject(path: Path, *, tilt_db: float = TILT_DB, level_db: float = 0.0,
            shuffle_seed: int | None = None) -> None:
    """LEAK clips get a spectral tilt (zero mean over the mels) and a level offset; with
    ``shuffle_seed`` the stored labels are then permuted (the features keep the truth)."""
    tilt = np.linspace(-tilt_db, tilt_db, N_MELS)[:, None] + level_db    # (M, 1)
    with h5py.File(path, "r+") as f:
        labels = f[H5_LABELS][:]
        mel = f[H5_MEL][:].astype(np.float32)
        mel[labels == LEAK] += tilt
        f[H5_MEL][:] = mel.astype(f[H5_MEL].dtype)
        if shuffle_seed is not None:
            f[H5_LABELS][:] = np.random.default_rng(shuffle_seed).permutation(labels)


def _params(tmp_path: Path, **baselines) -> Path:
    raw = yaml.safe_load(PARAMS.read_text())
    raw["baselines"].update({**SMALL_GRIDS, **baselines})
    raw["evaluate"]["bootstrap_resamples"] = 200
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _splits(root: Path, **inject) -> dict[str, Path]:
    paths = write_splits(root, recordings_per_class=4)               # 80 clips, 16 LEAK each
    for path in paths.values():
        _inject(path, **inject)
    return paths


def _run(params: Path, paths: dict[str, Path], eval_metrics=None):
    return compare_models(paths, load_section(params, "baselines"),
                          load_section(params, "evaluate"), load_section(params, "decision"),
                          eval_metrics)


def test_separable_clips_score_high_and_level_only_stays_at_chance(tmp_path: Path) -> None:
    report = _run(_params(tmp_path), _splits(tmp_path / "data"))
    for name in ("random_forest", "svm", "xgboost"):
        assert report.results[name].metrics["test/clip_f1"] >= LEARNED_F1, name
        assert report.results[name].metrics["test/clip_roc_auc"] >= LEARNED_ROC_AUC, name
    # one feature: the ranking is the clips' level order (or its reverse) whatever the fit's
    # floats: 0.58 here, 0.42 reversed
    assert abs(report.results["level_logreg"].metrics["test/clip_roc_auc"] - 0.5) < 0.2


def test_level_only_model_finds_a_loudness_cue(tmp_path: Path) -> None:
    params = _params(tmp_path, models=["level_logreg"])
    report = _run(params, _splits(tmp_path / "data", tilt_db=0.0, level_db=10.0))
    assert report.comparison["level_clip_roc_auc"] >= 0.95
    assert "best_baseline" not in report.comparison              # no MFCC model was run


def test_shuffled_training_labels_give_chance(tmp_path: Path) -> None:
    paths = _splits(tmp_path / "data")
    _inject(paths["train"], tilt_db=0.0, shuffle_seed=3)         # train labels carry nothing
    report = _run(_params(tmp_path), paths)
    for name in ("random_forest", "svm", "xgboost"):
        metrics = report.results[name].metrics
        # nothing learned: far below the separable clips' figures; one-sided, as chance lands
        # on either side of 0.5 (xgboost 0.35 here)
        assert metrics["test/clip_roc_auc"] < UNLEARNED_ROC_AUC, name
        assert metrics["test/clip_f1"] < UNLEARNED_F1, name


def _relabel(path: Path, swap: bool) -> None:
    """Swap LEAK with the first non-LEAK class of every site (class counts stay)."""
    with h5py.File(path, "r+") as f:
        labels = f[H5_LABELS][:]
        other = 0 if LEAK != 0 else 1
        f[H5_LABELS][:] = np.where(labels == LEAK, other, np.where(labels == other, LEAK,
                                                                   labels)) if swap else labels


def test_hyper_parameters_and_threshold_are_chosen_on_val_only(tmp_path: Path) -> None:
    params = _params(tmp_path, models=["svm"])
    paths = _splits(tmp_path / "data", tilt_db=6.0)              # overlapping classes
    base = _run(params, paths).results["svm"]
    _relabel(paths["test"], swap=True)                           # the test truth changes
    flipped = _run(params, paths).results["svm"]
    assert (flipped.point.threshold, flipped.hyper) == (base.point.threshold, base.hyper)
    assert flipped.metrics["test/clip_f1"] != base.metrics["test/clip_f1"]
    _relabel(paths["val"], swap=True)                            # the val truth decides
    moved = _run(params, paths).results["svm"]
    assert (moved.point.threshold, moved.hyper) != (base.point.threshold, base.hyper)
    assert moved.grid[0]["val_criterion"] != base.grid[0]["val_criterion"]


def test_runs_are_deterministic(tmp_path: Path) -> None:
    params, paths = _params(tmp_path), _splits(tmp_path / "data", tilt_db=6.0)
    first, second = _run(params, paths), _run(params, paths)
    for name, result in first.results.items():
        assert result.metrics == second.results[name].metrics, name


def _eval_json(path: Path, files: int, f1: float = 0.95) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"test": {
        "clips": files, "clip_f1": f1, "clip_f1_ci_low": f1 - 0.1, "clip_f1_ci_high": 1.0,
        "clip_roc_auc": 0.99, "clip_roc_auc_ci_low": 0.9, "clip_roc_auc_ci_high": 1.0}}))


@pytest.fixture(scope="module")
def validated_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three splits, their passed validation stamp (the real `validate`: seconds), a CNN
    eval.json and params.yaml, made once for the module; each test works on a copy."""
    root = tmp_path_factory.mktemp("baselines-project")
    with pytest.MonkeyPatch.context() as mp, contextmanager(restore_logging)():
        mp.setenv("DVC_ROOT", str(root))
        mp.setenv("MLFLOW_TRACKING_URI", copied_store(root / "mlruns"))
        mp.chdir(root)
        _splits(root / "data" / "processed", tilt_db=8.0)
        validate_into(root / "data" / "processed", root / "reports", PARAMS)
    _eval_json(root / "metrics" / "eval.json", files=80)
    _params(root)
    return root


@pytest.fixture
def project(validated_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo-like folder: a copy of the module's validated project (the stamp holds the
    splits' sha256, which a copy keeps) with an MLflow store of its own, as the working
    directory and DVC root."""
    shutil.copytree(validated_project, tmp_path, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("mlruns"))
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


STAGE_ARGS = ["baselines", "--params", "params.yaml", "--validated", "reports/validated.json"]


def test_stage_writes_the_comparison_and_one_mlflow_run_per_model(project: Path) -> None:
    import mlflow

    assert main(STAGE_ARGS) == 0
    out = json.loads((project / "metrics" / "baselines.json").read_text())
    for name in ("random_forest", "svm", "xgboost", "level_logreg"):
        test = out[name]["test"]
        for key in ("clip_f1", "clip_accuracy", "clip_roc_auc", "clip_recall", "clip_precision"):
            assert test[f"{key}_ci_low"] <= test[key] <= test[f"{key}_ci_high"], (name, key)
        assert out[name]["eval"]["threshold"] == out[name]["eval"]["threshold"]  # not null
        assert 0.02 <= out[name]["eval"]["threshold"] <= 0.98
        assert out[name]["hyperparams"]
    comparison = out["comparison"]
    best = comparison["best_baseline"]
    assert comparison["baseline_clip_f1"] == max(
        out[m]["test"]["clip_f1"] for m in ("random_forest", "svm", "xgboost"))
    assert comparison["baseline_clip_f1"] == out[best]["test"]["clip_f1"]
    assert comparison["cnn_clip_f1"] == 0.95
    assert comparison["margin_clip_f1"] == pytest.approx(0.95 - comparison["baseline_clip_f1"])
    assert comparison["level_clip_roc_auc"] == out["level_logreg"]["test"]["clip_roc_auc"]

    plot = json.loads((project / "plots" / "baselines" / "comparison.json").read_text())
    assert [row["model"] for row in plot] == ["cnn", "random_forest", "svm", "xgboost",
                                              "level_logreg", "logger_stats", "min_level",
                                              "band_min_level"]
    stats = out["logger_stats"]
    assert stats["hyperparams"]["C"] in (0.01, 0.1, 1.0)
    for key in ("recording_roc_auc", "recording_f1", "clip_roc_auc", "clip_f1_ci_low"):
        assert key in stats["test"], key
    assert set(plot[0]) == {"model", "f1", "ci_low", "ci_high", "roc_auc"}

    runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.`{tracking.TAG_STAGE}` = 'baselines'")
    children = {r.data.tags.get("leakpipe.baseline"): r for r in runs
                if "mlflow.parentRunId" in r.data.tags}
    assert set(children) == {"random_forest", "svm", "xgboost", "level_logreg", "logger_stats",
                             "min_level", "band_min_level"}
    # the logger's rules: nothing fitted but the threshold, read from the quiet moments
    assert out["min_level"]["hyperparams"] == {"statistic": "level_p10", "percentile": 10.0}
    assert out["band_min_level"]["hyperparams"]["statistic"].startswith("band")
    assert "recording_roc_auc" in out["min_level"]["test"]
    svm = children["svm"]
    assert svm.data.metrics["test/clip_f1"] == pytest.approx(out["svm"]["test"]["clip_f1"])
    table = mlflow.artifacts.load_dict(f"{svm.info.artifact_uri}/baselines/svm/summary.json")
    rows = {row[0]: row[1] for row in table["data"]}            # every figure, in the table
    assert "eval/threshold" not in svm.data.metrics              # a chart: headline ones only
    assert rows["eval/threshold"] == pytest.approx(out["svm"]["eval"]["threshold"])
    assert svm.info.run_name == "baselines-svm"
    assert len(runs) == 8                                        # the parent and 7 children


@pytest.mark.parametrize(("break_input", "message"), [
    (lambda root: (root / "data" / "processed" / "test.h5").unlink(), "test.h5: no such file"),
    (lambda root: _eval_json(root / "metrics" / "eval.json", files=7),
     "eval.json: evaluated 7 test clips"),
    (lambda root: (root / "reports" / "validated.json").write_text('{"passed": false}'),
     "validation did not pass"),
])
def test_bad_input_is_one_line_and_writes_nothing(project: Path, break_input, message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    break_input(project)
    assert main(STAGE_ARGS) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (project / "metrics" / "baselines.json").exists()
    assert not (project / "plots" / "baselines").exists()


def test_too_many_mfccs_for_the_mel_bands_name_the_key(project: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    _params(project, n_mfcc=N_MELS + 1)
    assert main(STAGE_ARGS) == 2
    assert "baselines.n_mfcc: 17 exceeds the 16 mel bands" in capsys.readouterr().err


def test_without_eval_json_the_comparison_leaves_the_cnn_out(project: Path) -> None:
    (project / "metrics" / "eval.json").unlink()
    assert main([*STAGE_ARGS, "--plots-dir", "plots/b"]) == 0
    comparison = json.loads((project / "metrics" / "baselines.json").read_text())["comparison"]
    assert "cnn_clip_f1" not in comparison and "margin_clip_f1" not in comparison
    plot = json.loads((project / "plots" / "b" / "comparison.json").read_text())
    assert [row["model"] for row in plot][0] == "random_forest"


def test_mean_std_doubles_the_features(tmp_path: Path) -> None:
    paths = _splits(tmp_path / "data")
    table = read_features(paths["val"], 16, "mean_std")
    assert table.mfcc.shape == (80, 32) and table.level.shape == (80, 1)
    assert table.truth.sum() == 16 and len(set(table.recording_id)) == 40
    params = _params(tmp_path, models=["random_forest"], summary="mean_std")
    report = _run(params, paths)
    assert report.results["random_forest"].metrics["test/clip_f1"] >= LEARNED_F1


# -- the paired interval of the margin ----------------------------------------------------------

def test_paired_difference_of_identical_decisions_is_exactly_zero() -> None:
    from leakpipe.evaluate.bootstrap import paired_f1_difference

    truth = np.array([1, 1, 0, 0, 1, 0, 1, 0], dtype=bool)
    decision = np.array([1, 0, 0, 1, 1, 0, 1, 0], dtype=bool)
    ids = np.array(list("aabbccdd"))
    interval = paired_f1_difference(truth, decision, decision, ids, resamples=200,
                                    confidence=0.95, seed=0)
    assert (interval.low, interval.high) == (0.0, 0.0)


def test_paired_difference_of_a_better_detector_is_positive_and_narrower() -> None:
    from leakpipe.evaluate.bootstrap import bootstrap_intervals, paired_f1_difference

    rng = np.random.default_rng(0)
    truth = rng.random(400) < 0.4
    ids = np.repeat(np.arange(200), 2).astype(str)
    good = np.where(rng.random(400) < 0.9, truth, ~truth)      # 90 % right
    worse = np.where(rng.random(400) < 0.15, ~good, good)      # good, with 15 % flipped
    paired = paired_f1_difference(truth, good, worse, ids, resamples=500, confidence=0.95,
                                  seed=1)
    assert paired.low > 0.0
    separate = [bootstrap_intervals(truth, d, d.astype(float), ids, resamples=500,
                                    confidence=0.95, seed=1)["f1"] for d in (good, worse)]
    # narrower than what the two separate intervals allow for the difference
    widths = [i.high - i.low for i in separate]
    assert paired.high - paired.low < widths[0] + widths[1]


def test_cnn_predictions_give_the_margin_a_paired_interval(project: Path) -> None:
    import h5py

    with h5py.File(project / "data" / "processed" / "test.h5", "r") as f:
        recs = [r.decode() if isinstance(r, bytes) else str(r) for r in f["recording_id"][:]]
        labels = f["labels"][:]
        names = json.loads(f.attrs["class_names"])
    rows, seen = ["split,recording_id,clip,leak_decision"], {}
    for rec, label in zip(recs, labels, strict=True):
        seen[rec] = seen.get(rec, -1) + 1
        rows.append(f"test,{rec},{seen[rec]},{names[label]}")   # a perfect CNN
    (project / "reports" / "predictions.csv").write_text("\n".join(rows) + "\n")
    assert main(STAGE_ARGS) == 0
    comparison = json.loads((project / "metrics" / "baselines.json").read_text())["comparison"]
    assert comparison["margin_clip_f1_ci_low"] <= comparison["margin_clip_f1_ci_high"]
    assert comparison["margin_clip_f1_ci_high"] <= 1.0


def test_cnn_predictions_missing_a_clip_is_one_line_and_writes_nothing(project: Path,
                                                                       capsys) -> None:
    (project / "reports" / "predictions.csv").write_text(
        "split,recording_id,clip,leak_decision\ntest,nowhere.wav,0,LEAK\n")
    assert main(STAGE_ARGS) != 0
    assert "predictions.csv: no test prediction for clip 0 of" in capsys.readouterr().err
    assert not (project / "metrics" / "baselines.json").exists()
    (project / "reports" / "predictions.csv").write_text(         # evaluate's old column name
        "split,recording_id,clip,decision\ntest,nowhere.wav,0,LEAK\n")
    assert main(STAGE_ARGS) == 3
    assert "no leak_decision column" in capsys.readouterr().err
