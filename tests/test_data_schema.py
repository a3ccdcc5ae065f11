"""The HDF5 contract: writer/reader round trip, label mapping, schema checks, atomic writes."""

from __future__ import annotations

import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from leakpipe.constants import ATTR_SCHEMA_VERSION, BINARY_CLASSES, KNOWN_CLASSES
from leakpipe.data import DataFormatError, binary_labels, leak_index, open_split
from leakpipe.data.schema import task_classes, task_labels
from leakpipe.data.writer import SplitWriter, chunk_rows


def _write(path: Path, features, labels=(0, 2, 4), clips=2, classes=KNOWN_CLASSES, **kw):
    rng = np.random.default_rng(0)
    rows = []
    with SplitWriter(path, "train", features, tuple(classes), **kw) as writer:
        for i, label in enumerate(labels):
            mel = rng.normal(-40, 10, (clips, *features.segment_shape)).astype(np.float16)
            writer.append(mel, label, f"rec{i}.wav", f"site{i % 2}")
            rows.append(mel)
    return np.concatenate(rows)


def test_round_trip(tmp_path: Path, tiny_features) -> None:
    path = tmp_path / "train.h5"
    mel = _write(path, tiny_features)
    with open_split(path) as split:
        assert split.class_names == KNOWN_CLASSES
        assert split.features == tiny_features
        assert split.n_files == 6
        np.testing.assert_array_equal(split.mel[:], mel)
        np.testing.assert_array_equal(split.labels, [0, 0, 2, 2, 4, 4])
        np.testing.assert_array_equal(split.binary_labels, [0, 0, 1, 1, 0, 0])
        assert list(split.recording_ids) == ["rec0.wav"] * 2 + ["rec1.wav"] * 2 + ["rec2.wav"] * 2
        assert list(split.groups[:3]) == ["site0", "site0", "site1"]
        np.testing.assert_array_equal(split.read_files(np.array([4, 1])), mel[[4, 1]])
        blocks = [block for _, block in split.iter_chunks(rows_per_read=4)]
        np.testing.assert_array_equal(np.concatenate(blocks), mel)
        assert split.as_segments(blocks[0]).shape == (4 * 7 * 7, 16, 1)
    assert not path.with_name(".train.h5.tmp").exists()


def test_the_same_rows_give_byte_identical_files(tmp_path: Path, tiny_features) -> None:
    """No timestamps anywhere: DVC sees an unchanged build as unchanged."""
    _write(tmp_path / "a.h5", tiny_features)
    time.sleep(1.1)                                   # a second later: any clock would show
    _write(tmp_path / "b.h5", tiny_features)
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()


def test_chunks_hold_whole_files(tmp_path: Path, tiny_features) -> None:
    path = tmp_path / "train.h5"
    _write(path, tiny_features, chunk_mb=0.01)
    with h5py.File(path) as f:
        chunks = f["mel"].chunks
    row_bytes = int(np.prod(tiny_features.segment_shape)) * 2
    assert chunks[1:] == tiny_features.segment_shape
    assert chunks[0] == chunk_rows(row_bytes, 0.01) == (int(0.01 * 2**20) // row_bytes)


def test_error_inside_writer_leaves_nothing(tmp_path: Path, tiny_features) -> None:
    path = tmp_path / "train.h5"
    with pytest.raises(RuntimeError), SplitWriter(path, "train", tiny_features, KNOWN_CLASSES):
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("classes", "labels", "expected_leak", "binary"), [
    (KNOWN_CLASSES, [0, 1, 2, 3, 4, 2], 2, [0, 0, 1, 0, 0, 1]),
    (BINARY_CLASSES, [0, 1, 1, 0], 1, [0, 1, 1, 0]),
    (("LEAK", "NORMAL"), [1, 0, 0], 0, [0, 1, 1]),
])
def test_leak_index_comes_from_class_names(classes, labels, expected_leak, binary) -> None:
    assert leak_index(classes) == expected_leak
    np.testing.assert_array_equal(binary_labels(np.array(labels), classes), binary)
    np.testing.assert_array_equal(task_labels(np.array(labels), classes, binary=True), binary)
    np.testing.assert_array_equal(task_labels(np.array(labels), classes, binary=False), labels)
    assert task_classes(classes, binary=True) == BINARY_CLASSES


def test_no_leak_class_is_an_error() -> None:
    with pytest.raises(DataFormatError, match="do not contain the leak class"):
        leak_index(("NORMAL", "BACKGROUND"))


def _corrupt(path: Path, action) -> None:
    with h5py.File(path, "r+") as f:
        action(f)


@pytest.mark.parametrize(("action", "message"), [
    (lambda f: f.attrs.__setitem__(ATTR_SCHEMA_VERSION, 99), "unknown schema_version 99"),
    (lambda f: f.attrs.__delitem__("class_names"), "attribute 'class_names' missing"),
    (lambda f: f.__delitem__("labels"), "dataset 'labels' missing"),
    (lambda f: f.attrs.__setitem__("class_names", "[1, 2]"), "JSON list of strings"),
    (lambda f: f.attrs.__setitem__("class_names", '["A", "B"]'), "do not contain the leak"),
    (lambda f: f.attrs.__setitem__("feature_config", "{"), "not valid JSON"),
])
def test_reader_rejects_contract_violations(tmp_path: Path, tiny_features, action,
                                            message: str) -> None:
    path = tmp_path / "val.h5"
    _write(path, tiny_features)
    _corrupt(path, action)
    with pytest.raises(DataFormatError) as info:
        open_split(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_reader_rejects_non_hdf5(tmp_path: Path) -> None:
    path = tmp_path / "test.h5"
    path.write_text("not hdf5")
    with pytest.raises(DataFormatError, match="not a readable HDF5 file"):
        open_split(path)
