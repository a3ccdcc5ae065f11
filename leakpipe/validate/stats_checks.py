"""Checks of a split's whole-recording statistics (``recording_stats``, h5py and numpy only).

The statistics are dB levels re full scale of a recording's frames (leakpipe/features/
recording_stats.py), so a plausible one lies between the build's level floor and a little above
0 dB (a full-scale square wave is 0 dB); spreads and standard deviations are not negative; a
band is missing (NaN) exactly when its upper edge lies above the recording's Nyquist frequency,
and nowhere else; every clip row of one recording carries the same values.
"""

from __future__ import annotations

import json
import re
from typing import Any

import h5py
import numpy as np

from leakpipe.constants import (
    ATTR_STATS_CONFIG,
    ATTR_STATS_NAMES,
    H5_RECORDING_ID,
    H5_RECORDING_RATE,
    H5_RECORDING_STATS,
)
from leakpipe.features.recording_stats import GAIN_FREE, REL, band_present
from leakpipe.validate.results import KIND_STRUCTURE, CheckResult, failed, passed

LEVEL_MAX_DB = 20.0     # above full scale by more than this: not a level
REL_MAX_DB = 200.0      # a band's median relative to the overall median, either way
_BAND = re.compile(r"^band([0-9.]+)_")

def _result(check: str, split: str, bad: list[int], problem: str,
            observed: Any = None) -> CheckResult:
    if not bad:
        return passed(check, split, KIND_STRUCTURE, observed=observed)
    return failed(check, split, KIND_STRUCTURE, problem, observed=observed, rows=bad)


def stats_checks(split: str, h5: h5py.File, n_files: int) -> list[CheckResult]:
    """The ``stats_*`` checks (leakpipe.validate.results.CHECKS) of an open split file of
    ``n_files`` rows."""
    if H5_RECORDING_STATS not in h5 and H5_RECORDING_RATE not in h5:
        # a split built before recording statistics: the clip methods need none of them, and
        # logger_stats / fused refuse it with their own line
        return [passed("stats_present", split, KIND_STRUCTURE, observed="absent")]
    names, floor, problem = _columns(h5, n_files)
    if problem:
        return [failed("stats_present", split, KIND_STRUCTURE, problem)]
    out = [passed("stats_present", split, KIND_STRUCTURE, observed=len(names))]
    stats = h5[H5_RECORDING_STATS][:].astype(np.float64)          # (N, S)
    rates = h5[H5_RECORDING_RATE][:].astype(np.float64)           # (N,)
    ids = h5[H5_RECORDING_ID].asstr()[:]
    expected_nan = _expected_missing(names, rates)                # (N, S)
    finite = np.isfinite(stats)
    out.append(_result("stats_missing_above_nyquist", split,
                       _rows((~finite) != expected_nan),
                       "statistics missing where the band is below Nyquist, or present "
                       "above it"))
    out.append(_result("stats_plausible", split, _rows(_implausible(stats, names, floor)),
                       f"statistics outside [{floor:g}, {LEVEL_MAX_DB:g}] dB, negative spreads "
                       "or non-finite values of present bands"))
    out.append(_result("stats_per_recording", split, _differing(stats, ids),
                       "clips of one recording carry different statistics"))
    return out


def _columns(h5: h5py.File, n: int) -> tuple[tuple[str, ...], float, str]:
    if H5_RECORDING_STATS not in h5 or H5_RECORDING_RATE not in h5:
        return (), 0.0, (f"one of {H5_RECORDING_STATS!r} / {H5_RECORDING_RATE!r} is missing "
                         "(both or neither)")
    try:
        names = tuple(json.loads(h5.attrs[ATTR_STATS_NAMES]))
        floor = float(json.loads(h5.attrs[ATTR_STATS_CONFIG])["floor_db"])
    except (KeyError, TypeError, ValueError) as exc:
        return (), 0.0, f"attributes {ATTR_STATS_NAMES!r} / {ATTR_STATS_CONFIG!r}: {exc}"
    shape, rate_shape = h5[H5_RECORDING_STATS].shape, h5[H5_RECORDING_RATE].shape
    if shape != (n, len(names)) or rate_shape != (n,):
        return (), 0.0, (f"{H5_RECORDING_STATS} has shape {shape} and {H5_RECORDING_RATE} "
                         f"{rate_shape}, expected ({n}, {len(names)}) and ({n},)")
    return names, floor, ""


def _expected_missing(names: tuple[str, ...], rates: np.ndarray) -> np.ndarray:
    out = np.zeros((len(rates), len(names)), dtype=bool)
    for j, name in enumerate(names):
        m = _BAND.match(name)
        if m:
            centre = float(m.group(1))
            out[:, j] = [not band_present(centre, r) for r in rates]
    return out


def _implausible(stats: np.ndarray, names: tuple[str, ...], floor: float) -> np.ndarray:
    bad = np.zeros(stats.shape, dtype=bool)
    for j, name in enumerate(names):
        col = stats[:, j]
        suffix = name.rsplit("_", 1)[-1]
        present = ~np.isnan(col)
        if suffix == REL:
            ok = np.abs(col) <= REL_MAX_DB
        elif suffix in GAIN_FREE:
            ok = (col >= 0) & np.isfinite(col)
        else:
            ok = (col >= floor - 1e-3) & (col <= LEVEL_MAX_DB)
        bad[:, j] = present & ~ok
    return bad


def _rows(bad: np.ndarray) -> list[int]:
    return np.flatnonzero(bad.any(axis=1)).tolist()


def _differing(stats: np.ndarray, ids: np.ndarray) -> list[int]:
    if not len(ids):
        return []
    same = np.r_[False, ids[1:] == ids[:-1]]
    equal = np.all((stats[1:] == stats[:-1]) | (np.isnan(stats[1:]) & np.isnan(stats[:-1])),
                   axis=1)
    return (np.flatnonzero(same[1:] & ~equal) + 1).tolist()


__all__ = ["stats_checks"]
