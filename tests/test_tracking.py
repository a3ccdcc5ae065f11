"""The MLflow adapter against a real SQLite store: where runs land, tags, end states."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from leakpipe import tracking
from leakpipe.errors import DataError
from leakpipe.tracking.names import DESCRIPTION_TAG, ERROR_TAG_CHARS
from tests.conftest import REPO
from tests.helpers_detector import copied_store

SCRIPT = """
from leakpipe import tracking
with tracking.start_run("probe") as run:
    run.log_params({"build": {"n_mels": 32, "classes": ["LEAK", "NORMAL"]}})
    run.log_metrics({"build/seconds": 1.5})
"""


def _runs(uri: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments()
    return client.search_runs([e.experiment_id for e in experiments])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "DVC_ROOT", "DVC_EXP_NAME")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "sub" / "dir").mkdir(parents=True)
    (project / "dvc.yaml").write_text("stages: {}\n")
    return project


def test_run_lands_in_project_store_from_another_cwd(tmp_path: Path) -> None:
    project = _project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-c", SCRIPT], cwd=elsewhere, check=True,
                   env=_env(DVC_ROOT=str(project), DVC_EXP_NAME="exp-abc"))
    runs = _runs(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags[tracking.TAG_STAGE] == "probe"
    assert run.data.tags["dvc.exp_name"] == "exp-abc"
    assert run.data.params == {"build.n_mels": "32", "build.classes": "LEAK,NORMAL"}
    assert run.data.metrics == {"build/seconds": 1.5}
    assert run.info.artifact_uri.startswith((project / "mlruns" / "artifacts").as_uri())
    assert list(elsewhere.iterdir()) == []


def test_another_sqlite_store_keeps_its_artifacts_beside_it_not_in_the_project(
        tmp_path: Path) -> None:
    """A benchmark or a test points MLFLOW_TRACKING_URI at a scratch store: its runs' artifacts
    go to that store's folder, and the project's mlruns/ stays untouched."""
    project = _project(tmp_path)
    store = tmp_path / "scratch" / "mlflow.db"
    store.parent.mkdir()
    subprocess.run([sys.executable, "-c", SCRIPT], cwd=project, check=True,
                   env=_env(MLFLOW_TRACKING_URI=f"sqlite:///{store}"))
    runs = _runs(f"sqlite:///{store}")
    assert len(runs) == 1
    assert runs[0].info.artifact_uri.startswith((store.parent / "artifacts").as_uri())
    assert not (project / "mlruns").exists()


def test_root_found_by_walking_up_without_dvc_root(tmp_path: Path) -> None:
    project = _project(tmp_path)
    subprocess.run([sys.executable, "-c", SCRIPT], cwd=project / "sub" / "dir", check=True,
                   env=_env())
    assert len(_runs(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")) == 1
    assert not (project / "sub" / "dir" / "mlruns").exists()


def test_failed_and_killed_runs_are_marked(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow_store = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store)
    with pytest.raises(ValueError), tracking.start_run("bad"):
        raise ValueError("boom\n  a second line")
    with pytest.raises(KeyboardInterrupt), tracking.start_run("stopped"):
        raise KeyboardInterrupt
    with pytest.raises(DataError), tracking.start_run("build") as parent, \
            tracking.start_run("child", parent_run_id=parent.run_id):
        raise DataError("data/raw/LEAK/a.wav: not a WAV file (RIFF header missing)")
    runs = {r.info.run_name: r for r in _runs(mlflow_store)}
    states = {name: r.info.status for name, r in runs.items()}
    assert states == {"bad": "FAILED", "stopped": "KILLED", "build": "FAILED", "child": "FAILED"}
    errors = {name: r.data.tags.get(tracking.TAG_ERROR) for name, r in runs.items()}
    assert errors == {"bad": "ValueError: boom", "stopped": None,   # a stop is not an error
                      "build": "data/raw/LEAK/a.wav: not a WAV file (RIFF header missing)",
                      "child": "data/raw/LEAK/a.wav: not a WAV file (RIFF header missing)"}
    # the run's page says why at the top: the description's last paragraph
    last = {name: r.data.tags[DESCRIPTION_TAG].split("\n\n")[-1] for name, r in runs.items()}
    assert last == {"bad": "FAILED: ValueError: boom", "stopped": "KILLED: KeyboardInterrupt",
                    "build": f"FAILED: {errors['build']}", "child": f"FAILED: {errors['child']}"}
    assert runs["bad"].data.tags[DESCRIPTION_TAG].startswith("leakpipe bad")


def test_a_run_ends_as_its_tracker_says_and_notes_follow_the_description(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``end_as``: a block that ends normally may close its run KILLED (a pruned trial);
    ``add_note``: paragraphs after the description's line, kept when params come later."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    with tracking.start_run("pruned") as run:
        run.add_note("pruned at step 1")
        run.log_params({"a": 1})
        run.end_as("KILLED")
    with tracking.start_run("done") as done:
        with pytest.raises(ValueError, match="not 'PRUNED'"):
            done.end_as("PRUNED")
    runs = {r.info.run_id: r for r in _runs(os.environ["MLFLOW_TRACKING_URI"])}
    pruned, finished = runs[run.run_id], runs[done.run_id]
    assert (pruned.info.status, finished.info.status) == ("KILLED", "FINISHED")
    first, note = pruned.data.tags[DESCRIPTION_TAG].split("\n\n")
    assert first.startswith("leakpipe pruned") and "params digest" in first
    assert note == "pruned at step 1" and tracking.TAG_ERROR not in pruned.data.tags


def test_a_parents_figures_stay_on_the_parent_while_a_child_is_active(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """adapt logs each round's figures on its parent (one history per metric) from inside
    the round's child run: they must not land on the child."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    with tracking.start_run("adapt") as parent:
        for step in (1, 2):
            with tracking.start_run(f"round {step}", parent_run_id=parent.run_id) as child:
                child.log_metrics({"round/f1": 0.5})
                parent.log_metrics({"val/f1": 0.1 * step}, step=step)
                parent.set_tags({"leakpipe.rounds": str(step)})
    client = MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    history = client.get_metric_history(parent.run_id, "val/f1")
    assert [(m.step, round(m.value, 3)) for m in history] == [(1, 0.1), (2, 0.2)]
    assert client.get_run(parent.run_id).data.tags["leakpipe.rounds"] == "2"
    children = [r for r in _runs(os.environ["MLFLOW_TRACKING_URI"])
                if r.info.run_id != parent.run_id]
    assert len(children) == 2
    assert all(set(r.data.metrics) == {"round/f1"} for r in children)
    assert all("leakpipe.rounds" not in r.data.tags for r in children)


def test_an_error_line_is_one_bounded_line() -> None:
    assert tracking.error_line(RuntimeError()) == "RuntimeError"
    assert tracking.error_line(DataError("")) == "DataError"
    long = tracking.error_line(ValueError("x" * 2000))
    assert len(long) == ERROR_TAG_CHARS and long.endswith("...") and "\n" not in long


def test_the_experiment_opens_in_model_training_mode(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow 3 opens an experiment in GenAI or model-training mode by its kind tag: a new
    store's experiment is made a training one, and so is an older store's on the next run."""
    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "older")
    client = MlflowClient(tracking_uri=uri)
    older = client.create_experiment("older")          # as leakpipe made it before the tag
    assert tracking.TAG_EXPERIMENT_KIND not in client.get_experiment(older).tags
    with tracking.start_run("build"):
        pass
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME")
    with tracking.start_run("build"):
        pass
    new = client.get_experiment_by_name(tracking.DEFAULT_EXPERIMENT)
    for experiment in (client.get_experiment(older), new):
        assert experiment.tags[tracking.TAG_EXPERIMENT_KIND] == "custom_model_development"


def test_flatten_nested_mappings() -> None:
    assert tracking.flatten({"a": {"b": 1, "c": {"d": 2}}, "e/f": 3}) == {
        "a.b": 1, "a.c.d": 2, "e/f": 3}


def test_git_commit_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], cwd=tmp_path, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True, check=True).stdout.strip()
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "abc123")
    tags = tracking.run_tags("train", tmp_path)
    assert tags[tracking.TAG_GIT_COMMIT] == head
    assert tags["dvc.baseline_rev"] == "abc123"


def test_summary_charts_headline_figures_and_tables_every_one() -> None:
    metrics = {"cv/fused/recording_roc_auc": 0.9, "cv/fused/recording_roc_auc_ci_low": 0.8,
               "cv/fused/recording_roc_auc_ci_high": 0.95, "test/clip_tp": 12.0,
               "test/class/LEAK/clip_recall": 0.7, "test/ece": float("nan")}
    assert tracking.summary.charted(metrics) == {"cv/fused/recording_roc_auc": 0.9}
    table = tracking.summary_table(metrics)
    assert table["figure"] == ["cv/fused/recording_roc_auc", "test/class/LEAK/clip_recall",
                               "test/clip_tp", "test/ece"]
    assert table["ci_low"][0] == 0.8 and table["ci_high"][0] == 0.95
    assert table["ci_low"][2] is None and table["value"][3] is None   # strict JSON


def test_the_summary_figure_draws_each_family_on_one_scale() -> None:
    metrics = {"test/clip_f1": 0.7, "test/clip_f1_ci_low": 0.6, "test/clip_f1_ci_high": 0.8,
               "test/clip_roc_auc": 0.85, "test/clip_roc_auc_ci_low": 0.8,
               "test/clip_roc_auc_ci_high": 0.9, "val/clip_f1": 0.72,
               "val/clip_f1_ci_low": 0.5, "val/clip_f1_ci_high": 0.9, "test/clip_tp": 40.0,
               "test/class/LEAK/clip_recall": 0.5, "test/class/LEAK/clip_recall_ci_low": 0.4,
               "test/class/LEAK/clip_recall_ci_high": 0.6}
    groups = tracking.summary.families(metrics)
    assert groups == {"test": [("clip_f1", 0.7, 0.6, 0.8), ("clip_roc_auc", 0.85, 0.8, 0.9)],
                      "val": [("clip_f1", 0.72, 0.5, 0.9)]}
    figure = tracking.summary.summary_figure(metrics)
    assert [ax.get_title(loc="left") for ax in figure.axes if ax.get_visible()] == ["test", "val"]
    assert all(ax.get_xlim() == (0.0, 1.0) for ax in figure.axes if ax.get_visible())
    assert tracking.summary.summary_figure({"test/clip_tp": 3.0}) is None
