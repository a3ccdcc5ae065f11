"""The MLflow adapter against a real SQLite store: where runs land, tags, end states."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from leakpipe import tracking
from tests.conftest import REPO

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


def test_root_found_by_walking_up_without_dvc_root(tmp_path: Path) -> None:
    project = _project(tmp_path)
    subprocess.run([sys.executable, "-c", SCRIPT], cwd=project / "sub" / "dir", check=True,
                   env=_env())
    assert len(_runs(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")) == 1
    assert not (project / "sub" / "dir" / "mlruns").exists()


def test_failed_and_killed_runs_are_marked(mlflow_store: str) -> None:
    with pytest.raises(ValueError), tracking.start_run("bad"):
        raise ValueError("boom")
    with pytest.raises(KeyboardInterrupt), tracking.start_run("stopped"):
        raise KeyboardInterrupt
    states = {r.info.run_name: r.info.status for r in _runs(mlflow_store)}
    assert states == {"bad": "FAILED", "stopped": "KILLED"}


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
