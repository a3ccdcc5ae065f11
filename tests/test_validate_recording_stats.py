"""validate's checks of the whole-recording statistics (leakpipe/validate/stats_checks.py) on
real split files written by ``SplitWriter``, each corrupted one way with h5py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from leakpipe.validate.stats_checks import stats_checks
from tests.helpers_h5 import STATS_COLUMNS, write_split

NAMES = STATS_COLUMNS.names


def _col(name: str) -> int:
    return NAMES.index(name)


def _checks(path: Path) -> dict[str, bool]:
    with h5py.File(path, "r") as h5:
        n = h5["mel"].shape[0]
        return {c.check: c.passed for c in stats_checks("val", h5, n)}


def _set(row: int, name: str, value: float) -> Callable[[h5py.File], None]:
    def edit(h5: h5py.File) -> None:
        stats = h5["recording_stats"][:]
        stats[row, _col(name)] = value
        h5["recording_stats"][:] = stats
    return edit


def _rate(value: int) -> Callable[[h5py.File], None]:
    def edit(h5: h5py.File) -> None:
        h5["recording_rate"][:] = value
    return edit


def _drop_rate(h5: h5py.File) -> None:
    del h5["recording_rate"]


def test_statistics_as_build_writes_them_pass(tmp_path: Path) -> None:
    checks = _checks(write_split(tmp_path / "val.h5", "val"))
    assert checks == {"stats_present": True, "stats_missing_above_nyquist": True,
                      "stats_plausible": True, "stats_per_recording": True}


@pytest.mark.parametrize(("edit", "check"), [
    (_set(0, "band250_p50", np.nan), "stats_missing_above_nyquist"),    # below Nyquist, missing
    (_set(1, "band2000_p50", -40.0), "stats_missing_above_nyquist"),    # above 2048 Hz, present
    (_rate(8192), "stats_missing_above_nyquist"),                        # 2 kHz band now present
    (_set(0, "level_p50", 45.0), "stats_plausible"),                     # far above full scale
    (_set(0, "level_p10", -400.0), "stats_plausible"),                   # below the floor
    (_set(0, "band1000_spread", -3.0), "stats_plausible"),
    (_set(0, "level_std", np.inf), "stats_plausible"),
    (_set(0, "level_p90", -33.0), "stats_per_recording"),                # row 0 != row 1
    (_drop_rate, "stats_present"),
])
def test_each_corruption_fails_its_check(tmp_path: Path, edit: Callable[[h5py.File], None],
                                         check: str) -> None:
    path = write_split(tmp_path / "val.h5", "val")
    with h5py.File(path, "r+") as h5:
        edit(h5)
    checks = _checks(path)
    assert checks[check] is False, checks
    assert sum(not ok for ok in checks.values()) >= 1


def test_a_split_built_before_statistics_passes_absent(tmp_path: Path) -> None:
    path = write_split(tmp_path / "val.h5", "val")
    with h5py.File(path, "r+") as h5:
        del h5["recording_stats"], h5["recording_rate"]
    assert _checks(path) == {"stats_present": True}
