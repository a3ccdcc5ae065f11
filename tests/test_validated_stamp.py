"""Only validated bytes reach training, tuning, evaluation and the baselines.

`validate` records the sha256 of every split file it passed in its stamp; `train`, `tune`,
`evaluate` and `baselines` hash the files they are about to read and refuse any other bytes
with one line (exit 3) before they write or log anything. ``--unvalidated`` skips the check for
an expert and tags the MLflow run; non-finite data then still stops training with one line.
Real splits, the real `validate` command and a real MLflow SQLite store.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import mlflow
import numpy as np
import pytest

from leakpipe import cli, tracking
from leakpipe.constants import EXIT_DATA, H5_MEL
from leakpipe.data.stamp import require_validated
from leakpipe.errors import DataError
from leakpipe.files import file_sha256
from tests.conftest import PARAMS
from tests.helpers_h5 import validate_into
from tests.helpers_tune import make_workspace as make_tune_workspace
from tests.test_train_stage import Workspace, fresh_mlflow_uri, make_workspace, stage_args


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Path]:
    """A train workspace whose splits the real `validate` passed, and its stamp."""
    root = tmp_path_factory.mktemp("stamp")
    ws = make_workspace(root / "ws", train={"epochs": 1})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", fresh_mlflow_uri(root / "validate-mlflow"))
        stamp = validate_into(ws.root, root / "reports", PARAMS, splits=tuple(ws.data))
    return ws, stamp


def _copy(ws: Workspace, root: Path) -> Workspace:
    """The workspace's splits, params and plan under ``root`` (so a test may edit them)."""
    shutil.copytree(ws.root, root / "ws")
    data = {split: root / "ws" / path.name for split, path in ws.data.items()}
    return Workspace(root / "ws", root / "ws" / ws.params.name, data,
                     root / "ws" / ws.plan.name, root / "out")


def _copy_with_store(ws: Workspace, root: Path,
                     monkeypatch: pytest.MonkeyPatch) -> tuple[Workspace, str]:
    """``_copy`` plus an empty MLflow store of its own (``MLFLOW_TRACKING_URI``)."""
    uri = fresh_mlflow_uri(root / "mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return _copy(ws, root), uri


def _train_args(ws: Workspace, *extra: str) -> list[str]:
    args = [a for a in stage_args(ws) if a != "--unvalidated"]
    return ["train", *args, *extra]


def _error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The CLI's error lines (its log lines go to stderr as well)."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


def _edit_one_value(path: Path) -> None:
    with h5py.File(path, "r+") as f:
        f[H5_MEL][0, 0, 0, 0, 0] += 1.0


def _runs(uri: str) -> list[mlflow.entities.Run]:
    client = mlflow.MlflowClient(tracking_uri=uri)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def test_the_stamp_holds_the_sha256_of_each_file_validate_passed(
        validated: tuple[Workspace, Path]) -> None:
    ws, stamp = validated
    assert require_validated(stamp, ws.data) == {s: file_sha256(p) for s, p in ws.data.items()}


def test_the_validate_run_names_each_files_sha256_with_its_split(
        validated: tuple[Workspace, Path]) -> None:
    ws, stamp = validated
    (run,) = _runs(f"sqlite:///{stamp.parent.parent / 'validate-mlflow' / 'mlflow.db'}")
    sha = {split: file_sha256(path) for split, path in ws.data.items()}
    assert run.data.tags[tracking.TAG_DATA] == ",".join(f"{s}:{sha[s]}" for s in sorted(sha))
    assert {d.dataset.name: d.dataset.digest for d in run.inputs.dataset_inputs} == {
        split: digest[:12] for split, digest in sha.items()}


def test_train_refuses_a_split_edited_after_validation(
        validated: tuple[Workspace, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    base, stamp = validated
    ws, uri = _copy_with_store(base, tmp_path, monkeypatch)
    _edit_one_value(ws.data["val"])

    code = cli.main(_train_args(ws, "--validated", str(stamp)))

    err = _error_lines(capsys)
    assert code == EXIT_DATA
    assert len(err) == 1 and "val.h5: not the file `validate` passed" in err[0], err
    assert "--unvalidated" in err[0]
    assert not ws.out.exists()                    # no model, no metrics, no checkpoint
    assert _runs(uri) == []                       # and no MLflow run


def test_train_on_validated_splits_runs_untagged(validated: tuple[Workspace, Path],
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    base, stamp = validated
    ws, uri = _copy_with_store(base, tmp_path, monkeypatch)

    assert cli.main(_train_args(ws, "--validated", str(stamp))) == 0

    assert ws.model.is_file()
    (run,) = _runs(uri)
    assert tracking.TAG_UNVALIDATED not in run.data.tags
    # one digest per file, named with its split: the sha256 validate stamped (the tag) and its
    # first 12 hex digits (the datasets); no other digest of the data among the params
    sha = {split: file_sha256(path) for split, path in ws.data.items()}
    assert run.data.tags[tracking.TAG_DATA] == f"train:{sha['train']},val:{sha['val']}"
    assert not [key for key in run.data.params if key.startswith("data.")]
    # the splits are the run's datasets, named, with their content hash and path
    inputs = {d.dataset.name: d for d in run.inputs.dataset_inputs}
    assert set(inputs) == {"train", "val"}
    for split, found in inputs.items():
        assert found.dataset.digest == file_sha256(ws.data[split])[:12]
        assert str(ws.data[split].resolve()) in found.dataset.source
        assert [t.value for t in found.tags if t.key == "mlflow.data.context"] == [
            tracking.DATASET_CONTEXT[split]]
    # a name that says what differs, and a one-line description
    name = run.data.tags["mlflow.runName"]
    assert name.startswith("train p") and len(name) == len("train p") + 7
    assert run.data.tags["mlflow.note.content"].startswith("leakpipe train")


def test_nan_data_is_refused_and_unvalidated_it_stops_training_with_one_line(
        validated: tuple[Workspace, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    base, _ = validated
    ws, uri = _copy_with_store(base, tmp_path, monkeypatch)
    with h5py.File(ws.data["train"], "r+") as f:
        mel = f[H5_MEL][...]
        mel[::3] = np.nan                          # every third file: NaN
        f[H5_MEL][...] = mel
    reports = tmp_path / "reports"
    assert cli.main(["validate", "--params", str(PARAMS), "--data-dir", str(ws.root),
                     "--splits", *ws.data, "--report", str(reports / "validation.json"), "--html",
                     str(reports / "validation.html"), "--stamp", str(reports / "v.json"),
                     "--no-progress"]) == EXIT_DATA
    capsys.readouterr()

    assert cli.main(_train_args(ws, "--validated", str(reports / "v.json"))) == EXIT_DATA
    assert "no validation stamp" in capsys.readouterr().err

    code = cli.main(_train_args(ws, "--unvalidated"))

    err = capsys.readouterr().err
    assert code != 0
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        line for line in err.splitlines() if "non-finite loss" in line], err
    assert "non-finite loss" in err and "Traceback" not in err
    assert not ws.model.exists()
    runs = [r for r in _runs(uri) if r.data.tags.get(tracking.TAG_STAGE) == "train"]
    assert [r.data.tags.get(tracking.TAG_UNVALIDATED) for r in runs] == ["true"]
    assert runs[0].info.status == "FAILED"


def test_validated_and_unvalidated_cannot_be_given_together(
        validated: tuple[Workspace, Path], capsys: pytest.CaptureFixture[str]) -> None:
    ws, stamp = validated
    with pytest.raises(SystemExit) as exit_info:
        cli.main(_train_args(ws, "--validated", str(stamp), "--unvalidated"))
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_tune_refuses_splits_validate_did_not_pass(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tune = make_tune_workspace(tmp_path / "tune")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_mlflow_uri(tmp_path / "mlflow"))
    stamp = validate_into(tune.paths.train.parent, tmp_path / "reports", PARAMS)
    capsys.readouterr()
    _edit_one_value(tune.paths.train)
    args = [a for a in tune.stage_args() if a != "--unvalidated"]

    assert cli.main(["tune", *args, "--validated", str(stamp)]) == EXIT_DATA

    assert "train.h5: not the file `validate` passed" in capsys.readouterr().err
    assert not tune.paths.best.exists() and not tune.paths.metrics.exists()


@pytest.mark.parametrize("split", ["train", "val"])
def test_require_validated_names_the_split_and_the_stamp(validated: tuple[Workspace, Path],
                                                         tmp_path: Path, split: str) -> None:
    base, stamp = validated
    ws = _copy(base, tmp_path)
    _edit_one_value(ws.data[split])
    with pytest.raises(DataError, match=f"{split}.h5: not the file `validate` passed"):
        require_validated(stamp, ws.data)
    with pytest.raises(DataError, match="holds no validated 'holdout' split"):
        require_validated(stamp, {"holdout": ws.data["train"]})
