"""A project's MLflow store survives a move or a copy of the project folder (real SQLite
stores, real artifacts, real logged models): what was logged is read from the new folder, new
runs write under it, and `leakpipe tracking repoint` does it on request."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.tracking import relocate
from tests.helpers_detector import copied_store, restore_logging

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
TEXT = "logged before the move\n"


def _project(root: Path) -> Path:
    """A project folder (dvc.yaml) with its store in mlruns/ holding one run with a file, and
    one logged model with a file."""
    root.mkdir(parents=True)
    (root / "dvc.yaml").write_text("stages: {}\n")
    copied_store(root / "mlruns")
    return root


def _use(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Work in ``project`` as a process started there would: its root, its store (MLflow puts
    the URI it was last given into MLFLOW_TRACKING_URI; this sets it back on teardown)."""
    monkeypatch.setenv("DVC_ROOT", str(project))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{_store(project)}")


def _log_run(project: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """One run with a file and one logged model with a file; (run id, model id)."""
    _use(project, monkeypatch)
    note = project / "note.txt"
    note.write_text(TEXT)
    with tracking.start_run("probe") as run:
        run.log_artifact(note, "probe")
    client = MlflowClient(tracking.tracking_uri())
    experiment = client.get_experiment_by_name(tracking.DEFAULT_EXPERIMENT).experiment_id
    model = client.create_logged_model(experiment, name="probe-model")
    detector = project / "probe.pt"        # download_model looks for a detector file's suffix
    detector.write_text(TEXT)
    client.log_model_artifact(model.model_id, str(detector))
    client.finalize_logged_model(model.model_id, "READY")
    return run.run_id, model.model_id


def _store(project: Path) -> Path:
    return project / "mlruns" / "mlflow.db"


def _locations(project: Path) -> list[str]:
    """Every artifact location the store records for leakpipe (its experiment, runs, logged
    models; the store's Default experiment is the test template's)."""
    with sqlite3.connect(_store(project)) as con:
        return [row[0] for sql in ("SELECT artifact_location FROM experiments WHERE name = "
                                   f"'{tracking.DEFAULT_EXPERIMENT}'",
                                   "SELECT artifact_uri FROM runs",
                                   "SELECT artifact_location FROM logged_models")
                for row in con.execute(sql)]


def _under(location: str, folder: Path) -> bool:
    path = relocate.local_path(location)
    return path is not None and path.is_relative_to(folder)


def _read_back(project: Path, run_id: str, model_id: str, tmp: Path,
               text: str = TEXT) -> None:
    """The run's file (``text``) and the logged model's file, downloaded through MLflow."""
    uri = f"sqlite:///{_store(project)}"
    client = MlflowClient(uri)
    got = client.download_artifacts(run_id, "probe/note.txt", str(tmp))
    assert Path(got).read_text() == text
    assert client.get_run(run_id).info.artifact_uri.startswith(project.as_uri() + "/")
    assert tracking.download_model(f"models:/{model_id}").read_text() == TEXT


def _new_run(project: Path) -> Path:
    """A new run's file: where it lands."""
    note = project / "after.txt"
    note.write_text("after\n")
    with tracking.start_run("probe") as run:
        run.log_artifact(note)
    return project / "mlruns" / "artifacts" / run.run_id / "artifacts" / "after.txt"


def test_a_moved_project_reads_its_artifacts_and_writes_new_ones_in_its_new_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _project(tmp_path / "old")
    run_id, model_id = _log_run(old, monkeypatch)
    assert all(_under(loc, old) for loc in _locations(old))     # MLflow records absolute paths
    new = tmp_path / "elsewhere" / "new"
    new.parent.mkdir()
    shutil.move(old, new)

    _use(new, monkeypatch)
    written = _new_run(new)              # the first run repoints the store, then writes
    assert written.read_text() == "after\n"
    assert not old.exists()
    assert all(_under(loc, new) for loc in _locations(new)), _locations(new)
    _read_back(new, run_id, model_id, tmp_path / "download")


def test_a_copied_project_keeps_apart_from_the_original(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = _project(tmp_path / "original")
    run_id, model_id = _log_run(original, monkeypatch)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    (copy / "mlruns" / "artifacts" / run_id / "artifacts" / "probe" / "note.txt").write_text(
        "the copy's own\n")             # edited in the copy only: read from there
    before = sorted(p.relative_to(original) for p in original.rglob("*"))

    _use(copy, monkeypatch)
    written = _new_run(copy)
    assert written.is_file() and written.is_relative_to(copy)
    assert sorted(p.relative_to(original) for p in original.rglob("*")) == before
    assert all(_under(loc, original) for loc in _locations(original))   # the original intact
    assert all(_under(loc, copy) for loc in _locations(copy))
    _read_back(copy, run_id, model_id, tmp_path / "download", "the copy's own\n")


def test_repoint_command_after_the_artifacts_were_moved_by_hand(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """Only the database moved first: a stage leaves the store alone (its artifacts are not
    beside it; a WARNING names the command); once they are, the command repoints it, and
    ``--dry-run`` only counts."""
    old = _project(tmp_path / "old")
    run_id, model_id = _log_run(old, monkeypatch)
    new = _project(tmp_path / "new")
    shutil.copyfile(_store(old), _store(new))
    _use(new, monkeypatch)

    assert relocate.follow_move(_store(new)) is None
    assert "leakpipe tracking repoint" in caplog.text
    assert all(_under(loc, old) for loc in _locations(new))

    shutil.rmtree(new / "mlruns" / "artifacts", ignore_errors=True)
    shutil.move(old / "mlruns" / "artifacts", new / "mlruns" / "artifacts")
    assert main(["tracking", "repoint", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"tracking: would repoint {old / 'mlruns'} -> {new / 'mlruns'}: ")
    assert "1 runs" in out and "1 logged_models" in out
    assert all(_under(loc, old) for loc in _locations(new))    # a dry run changes nothing

    assert main(["tracking", "repoint"]) == 0
    assert capsys.readouterr().out.startswith("tracking: repointed ")
    assert all(_under(loc, new) for loc in _locations(new))
    _read_back(new, run_id, model_id, tmp_path / "download")
    assert main(["tracking", "repoint"]) == 0                   # again: nothing left to do
    assert "nothing to do" in capsys.readouterr().out


def test_repoint_refuses_a_store_that_is_not_sqlite(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    assert main(["tracking", "repoint"]) != 0
    assert "not a SQLite store" in capsys.readouterr().err
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}")
    assert main(["tracking", "repoint"]) != 0
    assert "no MLflow store here" in capsys.readouterr().err


def test_a_prefix_matches_whole_folder_names_only(tmp_path: Path) -> None:
    """``/x/mlruns`` moved: ``/x/mlruns2/...`` is another folder and stays as it is."""
    store = tmp_path / "new" / "mlflow.db"
    copied_store(store.parent)
    old = tmp_path / "old"
    with sqlite3.connect(store) as con:
        con.execute("INSERT INTO experiments (name, artifact_location, lifecycle_stage, "
                    "workspace) VALUES ('a', ?, 'active', 'default')",
                    ((old / "artifacts").as_uri(),))
        con.execute("INSERT INTO experiments (name, artifact_location, lifecycle_stage, "
                    "workspace) VALUES ('b', ?, 'active', 'default')",
                    (f"{old}2/artifacts",))
    assert relocate.moved_from(store) == sorted([old, Path(f"{old}2")])
    result = relocate.repoint(store, [old])
    assert result.rows["experiments"] == 1
    with sqlite3.connect(store) as con:
        rows = dict(con.execute("SELECT name, artifact_location FROM experiments "
                                "WHERE name IN ('a', 'b')").fetchall())
    assert rows == {"a": (store.parent / "artifacts").as_uri(), "b": f"{old}2/artifacts"}
