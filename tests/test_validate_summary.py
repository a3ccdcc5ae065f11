"""The streamed per-file summary: exact statistics, fingerprints, in-process == worker pool."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from leakpipe.validate import summary
from leakpipe.validate.pool import SummaryPool
from leakpipe.validate.stats import block_stats, fingerprints
from leakpipe.validate.structure import inspect_split
from leakpipe.validate.summary import read_rows
from tests.helpers_h5 import write_bulk_split, write_split

ROW = (3, 4, 5, 1)  # 60 values per file


def _rows(*rows: np.ndarray, dtype: str = "float16") -> np.ndarray:
    return np.stack([np.asarray(r, dtype=np.float64).reshape(ROW) for r in rows]).astype(dtype)


def _ramp(offset: float = 0.0) -> np.ndarray:
    return np.linspace(-90.0, 30.0, 60) + offset


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_block_stats_match_float64_reference(dtype: str) -> None:
    block = _rows(_ramp(), _ramp(5.0), np.full(60, -100.0), np.zeros(60), dtype=dtype)

    stats = block_stats(block)

    ref = block.reshape(4, -1).astype(np.float64)
    assert (stats.finite == 60).all()
    np.testing.assert_array_equal(stats.minimum, ref.min(axis=1))
    np.testing.assert_array_equal(stats.maximum, ref.max(axis=1))
    np.testing.assert_allclose(stats.total, ref.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(stats.sumsq, (ref**2).sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize(("bad", "finite"), [([np.nan], 59), ([np.inf], 59),
                                            ([-np.inf, np.nan, np.inf], 57)])
def test_non_finite_values_are_counted_and_excluded(bad: list[float], finite: int) -> None:
    row = _ramp()
    row[10:10 + len(bad)] = bad
    stats = block_stats(_rows(row))

    clean = row[np.isfinite(row)].astype(np.float16).astype(np.float64)
    assert stats.finite[0] == finite
    assert (stats.minimum[0], stats.maximum[0]) == (clean.min(), clean.max())
    assert stats.total[0] == pytest.approx(clean.sum(), rel=1e-6)


def test_a_row_without_finite_values_has_no_min_max() -> None:
    stats = block_stats(_rows(np.full(60, np.nan)))

    assert stats.finite[0] == 0 and np.isnan(stats.minimum[0]) and np.isnan(stats.maximum[0])


def test_fingerprints_equal_only_for_equal_bytes() -> None:
    a, b = _ramp(), _ramp()
    b[17] += 0.5
    block = _rows(a, a, b)

    fp = fingerprints(block.reshape(3, -1))

    assert fp[0] == fp[1] and fp[0] != fp[2]


def test_fingerprints_pad_rows_that_are_not_whole_words() -> None:
    odd = np.arange(6, dtype=np.float16).reshape(2, 3)  # 6-byte rows
    other = odd.copy()
    other[1, 2] = 9.0

    assert fingerprints(odd)[1] != fingerprints(other)[1]
    assert fingerprints(odd)[0] == fingerprints(other)[0]


def test_read_rows_are_whole_chunks(tmp_path: Path) -> None:
    path = write_bulk_split(tmp_path / "train.h5", "train", 300, chunk_mb=0.01)
    with h5py.File(path, "r") as h5:
        mel = h5["mel"]
        chunk = mel.chunks[0]
        assert read_rows(mel, 0.0001) == chunk            # never less than a chunk
        assert read_rows(mel, 1.0) % chunk == 0


def test_summary_frame_has_one_row_per_file(tmp_path: Path) -> None:
    meta = inspect_split("val", write_split(tmp_path / "val.h5", "val"))

    result = summary.summarise_split(meta, read_mb=0.01, constant_tol=0.01,
                                     progress=False)

    frame = result.frame
    assert list(frame.columns) == list(summary.SUMMARY_COLUMNS)
    assert len(frame) == meta.n_files and (frame["row"] == np.arange(meta.n_files)).all()
    assert (frame["finite_fraction"] == 1.0).all() and not frame["constant"].any()
    assert set(frame["class_name"]) == set(meta.class_names)
    assert len(result.checksum) == 64


def test_worker_pool_gives_the_same_summary_as_in_process(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    path = write_bulk_split(tmp_path / "train.h5", "train", 600, block=100, chunk_mb=0.01)
    meta = inspect_split("train", path)
    inline = summary.summarise_split(meta, read_mb=0.02, constant_tol=0.01, progress=False)
    monkeypatch.setattr(summary, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(summary, "TASK_BYTES", meta.nbytes // 5)
    pending = []
    real_start = summary.start_split
    monkeypatch.setattr(summary, "start_split",
                        lambda *a: pending.append(real_start(*a)) or pending[-1])

    with SummaryPool(2) as pool:
        pooled = summary.summarise_split(meta, read_mb=0.02, constant_tol=0.01, pool=pool,
                                         progress=False)
        workers = {p.pid for p in pool.executor()._processes.values()}
        again = summary.summarise_split(meta, read_mb=0.02, constant_tol=0.01, pool=pool,
                                        progress=False)
        assert {p.pid for p in pool.executor()._processes.values()} == workers

    assert all(p.futures is not None and len(p.futures) == 5 for p in pending)
    assert len(pending) == 2 and len(workers) == 2       # one pool for both splits
    pd.testing.assert_frame_equal(inline.frame, again.frame)
    pd.testing.assert_frame_equal(inline.frame, pooled.frame)
    assert inline.checksum == pooled.checksum
