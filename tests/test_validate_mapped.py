"""Zero-copy row blocks: the statistics of an h5py read, and h5py wherever mapping is unsafe."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from leakpipe.validate.mapped import MappedRows, find_layout
from leakpipe.validate.stats import RowStats
from leakpipe.validate.summary import stream_rows

ROW = (3, 4, 5)


def _write(path: Path, data: np.ndarray, **kwargs) -> Path:
    with h5py.File(path, "w") as h5:
        h5.create_dataset("mel", data=data, **kwargs)
    return path


def _data(rows: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-100, 40, (rows, *ROW)).astype(np.float16)


def _stats(path: Path, step: int, mapped: bool) -> RowStats:
    with h5py.File(path, "r") as h5:
        return stream_rows(h5["mel"], 0, h5["mel"].shape[0], step, path if mapped else None)


def _assert_same(a: RowStats, b: RowStats) -> None:
    for name in ("finite", "minimum", "maximum", "fingerprint"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_allclose(a.total, b.total, rtol=1e-6)
    np.testing.assert_allclose(a.sumsq, b.sumsq, rtol=1e-6)


@pytest.mark.parametrize("layout", [{"chunks": (7, *ROW)}, {"chunks": (1, *ROW)}, {}])
@pytest.mark.parametrize("step", [1, 5, 64])
def test_mapped_blocks_give_the_statistics_of_an_h5py_read(tmp_path: Path, layout: dict,
                                                           step: int) -> None:
    data = _data(30)
    data[4, 0, 0, 0] = np.nan                                   # a row on the masked path
    path = _write(tmp_path / "a.h5", data, **layout)
    with h5py.File(path, "r") as h5:
        layout = find_layout(path, h5["mel"])
    assert layout is not None and len(layout.extents) == 1       # chunks written back to back
    with MappedRows(path, layout) as mapped:
        rows = [(first, view.copy()) for first, view in mapped.blocks(3, 30, step)]
    assert np.array_equal(np.concatenate([v for _, v in rows]), data[3:], equal_nan=True)
    assert [first for first, _ in rows] == list(range(3, 30, step))
    _assert_same(_stats(path, step, mapped=True), _stats(path, step, mapped=False))


def test_filtered_data_is_read_with_h5py(tmp_path: Path) -> None:
    path = _write(tmp_path / "z.h5", _data(20), chunks=(4, *ROW), compression="gzip")
    with h5py.File(path, "r") as h5:
        assert find_layout(path, h5["mel"]) is None
    _assert_same(_stats(path, 4, mapped=True), _stats(path, 4, mapped=False))


def test_chunks_never_written_are_not_mapped(tmp_path: Path) -> None:
    path = tmp_path / "sparse.h5"
    with h5py.File(path, "w") as h5:
        mel = h5.create_dataset("mel", shape=(20, *ROW), dtype=np.float16, chunks=(4, *ROW))
        mel[:4] = _data(4)                                       # chunks 2..5 hold fill values
    with h5py.File(path, "r") as h5:
        assert find_layout(path, h5["mel"]) is None
    _assert_same(_stats(path, 4, mapped=True), _stats(path, 4, mapped=False))


def test_big_endian_data_is_not_mapped(tmp_path: Path) -> None:
    path = _write(tmp_path / "be.h5", _data(10).astype(">f2"), chunks=(5, *ROW))
    with h5py.File(path, "r") as h5:
        assert find_layout(path, h5["mel"]) is None


def test_chunks_beyond_the_end_of_a_truncated_file_are_not_mapped(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.h5", _data(40), chunks=(10, *ROW))
    with h5py.File(path, "r") as h5:
        size = path.stat().st_size
        with path.open("r+b") as handle:                         # cut while the index is open
            handle.truncate(size - 1000)
        assert find_layout(path, h5["mel"]) is None


def test_a_file_cut_after_its_layout_was_found_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.h5", _data(40), chunks=(10, *ROW))
    with h5py.File(path, "r") as h5:
        layout = find_layout(path, h5["mel"])
    assert layout is not None
    with path.open("r+b") as handle:
        handle.truncate(layout.extents[-1].offset + 10)
    with pytest.raises(OSError, match="shorter than its chunk index"):
        MappedRows(path, layout)
