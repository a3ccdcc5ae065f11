"""Stage `validate` end to end: valid data passes; every broken input fails with one clear line.

The bad-input corpus is a table: each case copies a valid set of splits, breaks it with h5py
(or by hand), runs `leakpipe validate` in-process and expects a non-zero exit whose message
names the split and the check. One case runs as a subprocess to prove the exit code and that
no traceback reaches the user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from leakpipe.cli import main
from leakpipe.constants import EXIT_DATA, KNOWN_CLASSES
from leakpipe.data.writer import SplitWriter
from leakpipe.validate.validation_report import REPORT_FORMAT
from tests.helpers_h5 import SMALL_FEATURES, write_splits

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
LEAK = 2  # index of LEAK in the helper's class_names (KNOWN_CLASSES)
NORMAL = 3


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One MLflow SQLite store for the session's validate / preload tests (each new store
    costs seconds of migrations)."""
    uri = f"sqlite:///{tmp_path_factory.getbasetemp() / 'mlflow-validate-preload.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri


@pytest.fixture(scope="module")
def valid_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("valid")
    write_splits(root)
    return root


def run_validate(data_dir: Path, out: Path, params: Path = PARAMS) -> int:
    return main(["validate", "--params", str(params), "--data-dir", str(data_dir),
                 "--report", str(out / "validation.json"), "--html", str(out / "validation.html"),
                 "--stamp", str(out / "validated.json"), "--no-progress"])


def params_with(tmp: Path, **validate: object) -> Path:
    raw = yaml.safe_load(PARAMS.read_text())
    raw["validate"].update(validate)
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


# -- corruptions ---------------------------------------------------------------------------


def _edit(split: str, edit: Callable[[h5py.File], None]) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        with h5py.File(root / f"{split}.h5", "a") as h5:
            edit(h5)
    return apply


def _replace(h5: h5py.File, key: str, data: np.ndarray) -> None:
    del h5[key]
    h5.create_dataset(key, data=data)


def _set_row(row: int, value: float) -> Callable[[h5py.File], None]:
    def edit(h5: h5py.File) -> None:
        block = h5["mel"][row]
        block.flat[5] = value
        h5["mel"][row] = block
    return edit


def _fill_row(row: int, value: float) -> Callable[[h5py.File], None]:
    def edit(h5: h5py.File) -> None:
        h5["mel"][row] = np.full(h5["mel"].shape[1:], value, dtype=h5["mel"].dtype)
    return edit


def _labels(change: Callable[[np.ndarray], None]) -> Callable[[h5py.File], None]:
    def edit(h5: h5py.File) -> None:
        labels = h5["labels"][:]
        change(labels)
        h5["labels"][:] = labels
    return edit


def _no_leak(labels: np.ndarray) -> None:
    labels[labels == LEAK] = 0


def _leak_heavy(labels: np.ndarray) -> None:
    for cls in (0, 1):
        labels[np.flatnonzero(labels == cls)[:4]] = LEAK


def _one_recording(label: int) -> Callable[[h5py.File], None]:
    """Every clip of class ``label`` gets one recording id: many clips, one recording."""
    def edit(h5: h5py.File) -> None:
        ids = h5["recording_id"][:]
        rows = h5["labels"][:] == label
        ids[rows] = b"the-only-one"
        h5["recording_id"][:] = ids
        stats = h5["recording_stats"][:]        # one recording: one set of statistics
        stats[rows] = stats[np.flatnonzero(rows)[0]]
        h5["recording_stats"][:] = stats
    return edit


def _attr(key: str, value: object) -> Callable[[h5py.File], None]:
    def edit(h5: h5py.File) -> None:
        h5.attrs[key] = value
    return edit


def _feature(key: str, value: object) -> Callable[[h5py.File], None]:
    def edit(h5: h5py.File) -> None:
        config = json.loads(h5.attrs["feature_config"])
        config[key] = value
        h5.attrs["feature_config"] = json.dumps(config)
    return edit


def _shared(key: str, target: str) -> Callable[[Path], None]:
    """Put train's row 0 value of dataset ``key`` into row 3 of split ``target``."""
    def apply(root: Path) -> None:
        with h5py.File(root / "train.h5", "r") as src, \
                h5py.File(root / f"{target}.h5", "a") as dst:
            dst[key][3] = src[key][0]
    return apply


def _truncate(root: Path) -> None:
    path = root / "val.h5"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble_header(root: Path) -> None:
    path = root / "val.h5"
    data = bytearray(path.read_bytes())
    data[:64] = b"\x00" * 64
    path.write_bytes(bytes(data))


def _not_hdf5(root: Path) -> None:
    (root / "test.h5").write_text("recording,label\nabc,LEAK\n")


def _missing_file(root: Path) -> None:
    (root / "test.h5").unlink()


def _empty_split(root: Path) -> None:
    with SplitWriter(root / "val.h5", "val", SMALL_FEATURES, KNOWN_CLASSES):
        pass  # no file appended


def _bad_utf8(h5: h5py.File) -> None:
    del h5["group"]
    h5.create_dataset("group", data=np.array([b"\xff\xfe"] * h5["mel"].shape[0]),
                      dtype=h5py.string_dtype("utf-8"))


# case id -> (corruption, split named, check named, validate param overrides)
CORPUS: dict[str, tuple[Callable[[Path], None], str, str, dict]] = {
    "missing_mel": (_edit("val", lambda h5: h5.__delitem__("mel")), "val", "datasets_present",
                    {}),
    "missing_labels": (_edit("val", lambda h5: h5.__delitem__("labels")), "val",
                       "datasets_present", {}),
    "wrong_rank": (_edit("val", lambda h5: _replace(h5, "mel", h5["mel"][:, 0])), "val",
                   "mel_rank", {}),
    "count_mismatch": (_edit("val", lambda h5: _replace(h5, "labels", h5["labels"][:-3])),
                       "val", "lengths_match", {}),
    "nan_values": (_edit("val", _set_row(6, np.nan)), "val", "finite_values", {}),
    "inf_values": (_edit("test", _set_row(2, np.inf)), "test", "finite_values", {}),
    "label_outside_class_names": (_edit("val", _labels(lambda x: x.__setitem__(1, 9))), "val",
                                  "labels_known", {}),
    "class_names_differ": (_edit("val", _attr("class_names", json.dumps(
        ["BACKGROUND", "LEAK", "CRACK", "NORMAL", "UNCLASSIFIED"]))), "val", "class_names_match",
                           {}),
    "feature_config_differs": (_edit("val", _feature("fmin", 20.0)), "val",
                               "feature_config_match", {}),
    "no_leak_in_val": (_edit("val", _labels(_no_leak)), "val", "classes_present", {}),
    "one_recording_of_a_class": (_edit("test", _one_recording(NORMAL)), "test",
                                 "recordings_present", {}),
    "recording_in_two_splits": (_shared("recording_id", "test"), "test", "recordings_disjoint",
                                {}),
    "group_in_two_splits": (_shared("group", "val"), "val", "groups_disjoint", {}),
    "duplicate_content": (_shared("mel", "test"), "test", "no_duplicate_content", {}),
    "truncated_file": (_truncate, "val", "readable", {}),
    "corrupt_header": (_garble_header, "val", "readable", {}),
    "unknown_schema_version": (_edit("val", _attr("schema_version", 99)), "val",
                               "schema_version", {}),
    "non_hdf5_file": (_not_hdf5, "test", "readable", {}),
    "missing_split_file": (_missing_file, "test", "readable", {}),
    "missing_class_names": (_edit("val", lambda h5: h5.attrs.__delitem__("class_names")), "val",
                            "attributes_present", {}),
    "constant_file": (_edit("train", _fill_row(4, -100.0)), "train", "not_constant", {}),
    "all_zero_file": (_edit("train", _fill_row(9, 0.0)), "train", "not_all_zero", {}),
    "value_out_of_range": (_edit("val", _set_row(0, 5000.0)), "val", "value_max", {}),
    "class_imbalance": (_edit("train", _labels(_leak_heavy)), "train", "class_balance",
                        {"class_fraction_max": 0.3}),
    "empty_split": (_empty_split, "val", "not_empty", {}),
    "undecodable_group_names": (_edit("val", _bad_utf8), "val", "readable", {}),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_bad_input_fails_with_a_clear_line(case: str, valid_dir: Path, tmp_path: Path,
                                           mlflow_uri: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    corrupt, split, check, overrides = CORPUS[case]
    data = tmp_path / "data"
    shutil.copytree(valid_dir, data)
    corrupt(data)
    params = params_with(tmp_path, **overrides) if overrides else PARAMS

    code = run_validate(data, tmp_path / "reports", params)

    err = capsys.readouterr().err
    assert code == EXIT_DATA
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"{split}: {check}" in lines[0], err
    assert "Traceback" not in err
    failed = json.loads((tmp_path / "reports" / "validation.failed.json").read_text())
    assert not failed["passed"]
    assert any(c["split"] == split and c["check"] == check and not c["passed"]
               for c in failed["checks"])
    assert not (tmp_path / "reports" / "validation.json").exists()
    assert not (tmp_path / "reports" / "validated.json").exists()


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 12


def test_valid_data_passes_with_one_summary_line(valid_dir: Path, tmp_path: Path,
                                                 mlflow_uri: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = run_validate(valid_dir, tmp_path)

    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert len(out) == 1 and out[0].startswith("validate: passed")
    report = json.loads((tmp_path / "validation.json").read_text())
    assert report["passed"] and report["n_failed"] == 0 and report["format"] == REPORT_FORMAT
    assert report["n_files"] == 120
    assert {c["check"] for c in report["checks"]} >= {"finite_values", "classes_present",
                                                      "no_duplicate_content"}
    assert "PASSED" in (tmp_path / "validation.html").read_text()
    stamp = json.loads((tmp_path / "validated.json").read_text())
    assert stamp["passed"] and set(stamp["splits"]) == {"train", "val", "test"}


def test_every_failure_is_collected(valid_dir: Path, tmp_path: Path, mlflow_uri: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    shutil.copytree(valid_dir, data)
    _edit("val", _set_row(3, np.nan))(data)
    _edit("val", _labels(_no_leak))(data)
    _shared("recording_id", "test")(data)

    code = run_validate(data, tmp_path / "reports")

    assert code == EXIT_DATA
    err = capsys.readouterr().err
    for text in ("val: finite_values", "val: classes_present", "test: recordings_disjoint"):
        assert text in err
    failed = json.loads((tmp_path / "reports" / "validation.failed.json").read_text())
    assert failed["n_failed"] == 3
    nan = next(c for c in failed["checks"] if c["check"] == "finite_values" and not c["passed"])
    assert nan["offending_rows"] == [3] and nan["examples"][0]["recording_id"]


def test_success_replaces_a_stale_failed_report(valid_dir: Path, tmp_path: Path,
                                                mlflow_uri: str) -> None:
    stale = tmp_path / "validation.failed.json"
    stale.write_text("{}")

    assert run_validate(valid_dir, tmp_path) == 0

    assert not stale.exists()


def test_subprocess_exit_code_and_no_traceback(valid_dir: Path, tmp_path: Path,
                                                mlflow_uri: str) -> None:
    data = tmp_path / "data"
    shutil.copytree(valid_dir, data)
    _not_hdf5(data)
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri}

    proc = subprocess.run(
        [sys.executable, str(REPO / "stages" / "validate.py"), "--params", str(PARAMS),
         "--data-dir", str(data), "--report", str(tmp_path / "validation.json"),
         "--html", str(tmp_path / "validation.html"), "--stamp", str(tmp_path / "v.json"),
         "--no-progress"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)

    assert proc.returncode == EXIT_DATA
    assert "Traceback" not in proc.stderr
    assert "error: validation stopped: test: readable" in proc.stderr


def test_one_recording_of_a_class_fails_with_split_and_class(valid_dir: Path, tmp_path: Path,
                                                            mlflow_uri: str,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    data = tmp_path / "data"
    shutil.copytree(valid_dir, data)
    _edit("val", _one_recording(NORMAL))(data)  # 8 clips of 4 recordings -> one recording

    assert run_validate(data, tmp_path / "reports") == EXIT_DATA
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert ("val: recordings_present: class NORMAL has 1 recording(s) (8 file(s), 2 group(s)); "
            "needs >= 2 recordings") in line
    assert run_validate(data, tmp_path / "lenient",
                        params_with(tmp_path, min_recordings_per_class=1)) == 0
    report = json.loads((tmp_path / "lenient" / "validation.json").read_text())
    val = report["splits"]["val"]
    assert val["recording_counts"]["NORMAL"] == 1 and val["recording_counts"]["LEAK"] == 4
    assert val["group_counts"]["NORMAL"] == 2 and val["class_counts"]["NORMAL"] == 8
