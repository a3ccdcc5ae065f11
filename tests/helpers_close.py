"""Outputs of two computations of the same thing (two processes or machines, a cluster and the
local pool, a fast path and its reference) compared as float32 allows: everything that is no
float exactly, the floats within a bound for rounding.

Such paths sum floats in other orders (FFT, BLAS and SIMD kernels pick their blocking by CPU,
thread count and alignment), so values may differ in their last bits; a bug (a wrong clip,
fold or recording, a shifted sample, a wrong scale) moves them by orders of magnitude more.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from leakpipe.constants import SPLITS

EPS32 = float(np.finfo(np.float32).eps)
# float32 sums of up to a few hundred terms taken in another order: a few ulp of the largest
# magnitude in practice; 16 bound them with room (log-mel in dB: 2e-4 dB at 100 dB)
ULPS = 16
F16_REL = 2.0 ** -10   # one float16 ulp of |x| is at most 2^-10 |x| (10 stored mantissa bits)


def float_tolerance(want: np.ndarray, dtype: np.dtype | type) -> dict[str, float]:
    """``assert_allclose`` bounds for values of ``dtype`` computed in float32 by another path:
    ULPS float32 ulp of the largest finite magnitude of ``want``, plus for float16 storage one
    float16 ulp of the value (a float32 value next to a float16 rounding boundary rounds to
    either side of it)."""
    finite = np.abs(np.asarray(want, np.float64))
    finite = finite[np.isfinite(finite)]
    scale = float(finite.max()) if finite.size else 0.0
    rtol = F16_REL if np.dtype(dtype) == np.float16 else 0.0
    return {"rtol": rtol, "atol": ULPS * EPS32 * scale}


def assert_floats_close(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """``got`` and ``want`` of one dtype and shape, within ``float_tolerance`` (NaNs at the
    same places)."""
    got, want = np.asarray(got), np.asarray(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), what
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               **float_tolerance(want, want.dtype), err_msg=what)


def _attrs(f: h5py.File) -> dict[str, Any]:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in f.attrs.items()}


def assert_splits_close(got: Path, want: Path) -> None:
    """Two split files built by different paths: the same attributes, datasets, dtypes,
    shapes and chunks, the same labels, ids, groups, clip indices and rates, and the float
    datasets (mel, recording statistics, waveforms) within ``float_tolerance``."""
    with h5py.File(got, "r") as a, h5py.File(want, "r") as b:
        assert _attrs(a) == _attrs(b), got
        assert sorted(a) == sorted(b), got
        for name in b:
            x, y = a[name], b[name]
            assert (x.dtype, x.shape, x.chunks, x.maxshape) == (
                y.dtype, y.shape, y.chunks, y.maxshape), f"{got}:{name}"
            if np.issubdtype(y.dtype, np.floating):
                assert_floats_close(x[()], y[()], f"{got}:{name}")
            else:
                np.testing.assert_array_equal(x[()], y[()], err_msg=f"{got}:{name}")


def assert_builds_close(got: Path, want: Path) -> None:
    """The three split files of two builds (``assert_splits_close``)."""
    for split in SPLITS:
        assert_splits_close(got / f"{split}.h5", want / f"{split}.h5")


def _close(a: float, b: float, rel: float, abs_: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def assert_json_close(got: Any, want: Any, *, rel: float, abs_: float = 0.0,
                      at: str = "") -> None:
    """Two JSON documents: the same keys (in order), lengths, strings, integers, booleans and
    nulls; their floats within ``rel`` (or ``abs_``) of each other, NaN equal to NaN."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), at
        for key, value in want.items():
            assert_json_close(got[key], value, rel=rel, abs_=abs_, at=f"{at}/{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), at
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_json_close(g, w, rel=rel, abs_=abs_, at=f"{at}[{i}]")
    elif isinstance(want, float) or isinstance(got, float):
        assert isinstance(got, int | float) and not isinstance(got, bool), (at, got, want)
        assert not isinstance(want, bool) and _close(got, want, rel, abs_), (at, got, want)
    else:
        assert type(got) is type(want) and got == want, (at, got, want)   # True is no 1


def _float_text(cell: str) -> bool:
    """A float as the tables write one (an integer column holds no '.', 'e' or 'nan')."""
    try:
        float(cell)
    except ValueError:
        return False
    return any(c in cell.lower() for c in ".en")


def assert_csv_close(got: str, want: str, *, rel: float, abs_: float = 0.0) -> None:
    """Two CSV texts: the same header and rows, each cell the same text, or, where the cells
    are floats, numbers within ``rel`` (or ``abs_``) of each other (a last printed digit may
    round the other way)."""
    a, b = list(csv.reader(io.StringIO(got))), list(csv.reader(io.StringIO(want)))
    assert len(a) == len(b) and a[:1] == b[:1], (len(a), len(b), a[:1], b[:1])
    for r, (row_a, row_b) in enumerate(zip(a, b, strict=True)):
        assert len(row_a) == len(row_b), r
        for column, x, y in zip(b[0], row_a, row_b, strict=True):
            if x != y:
                assert _float_text(x) and _float_text(y), (r, column, x, y)
                assert _close(float(x), float(y), rel, abs_), (r, column, x, y)
