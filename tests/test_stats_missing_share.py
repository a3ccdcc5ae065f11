"""A `logger_stats` detector keeps the share of its training recordings on which each statistic
was missing (leakpipe/stats_detector.py ``missing_share``): it round-trips through the file (a
fused one's part too), a recording missing a band that training's loggers often lacked is in
the domain and one missing a band training never lacked is shifted, naming it; a file written
before the field loads and keeps the older rule (any missing statistic is shifted). Real
recordings' statistics at real rates: 4096 Hz loggers, and 2048 Hz ones that lack the 1000 Hz
octave band."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.signal import resample_poly

from leakpipe.baselines.logger_stats import fit_net
from leakpipe.config import load_section
from leakpipe.decision.calibration import fit_platt
from leakpipe.decision.stats_domain import MIN_MISSING_SHARE, missing_shares
from leakpipe.detectors.registry import load_any_detector
from leakpipe.errors import DataError
from leakpipe.features.recording_stats import recording_stats, stat_names
from leakpipe.stats_detector import (
    StatsDetector,
    save_stats_detector,
)
from tests.conftest import PARAMS
from tests.test_ship import RATE, SPEC, _recording

HALF = RATE // 2          # Hz: lacks the 1000 Hz band (its upper edge is above 1024 Hz)
EIGHTH = RATE // 8        # Hz: lacks the 250 Hz band too, which no training logger lacked


def _stats(rng: np.random.Generator, leak: bool, rate: int) -> np.ndarray:
    return recording_stats(resample_poly(_recording(rng, leak), rate, RATE), rate, SPEC)


@pytest.fixture(scope="module")
def detector() -> StatsDetector:
    """Fitted on 16 recordings at 4096 Hz and 4 at 2048 Hz (the 1000 Hz band missing on 20 %
    of them)."""
    rng = np.random.default_rng(3)
    truth = np.tile([True, False], 10)
    rates = [RATE] * 16 + [HALF] * 4
    stats = np.stack([_stats(rng, t, r) for t, r in zip(truth, rates, strict=True)])
    net = fit_net(stats, truth, 0.1, stat_names(SPEC)).eval()
    return StatsDetector(net=net, stats=SPEC, threshold=0.5,
                         calibration=fit_platt(np.linspace(0.1, 0.9, 8),
                                               np.tile([False, True], 4)),
                         metrics={}, quality=load_section(PARAMS, "build").quality,
                         missing_share=missing_shares(stats))


def test_the_shares_are_of_the_training_recordings(detector: StatsDetector) -> None:
    share = dict(zip(detector.net.names, detector.missing_share, strict=True))
    assert share["band1000_p50"] == pytest.approx(0.2) and 0.2 >= MIN_MISSING_SHARE
    assert share["band250_p50"] == 0.0 and share["level_p50"] == 0.0


def test_a_band_training_lacked_is_in_one_it_never_lacked_is_shifted_by_name(
        detector: StatsDetector) -> None:
    rng = np.random.default_rng(8)
    half = _stats(rng, True, HALF)
    assert not np.isfinite(half[stat_names(SPEC).index("band1000_p50")])
    check = detector.domain(half)
    assert (check.domain, check.reason) == ("in", ""), check
    eighth = detector.domain(_stats(rng, True, EIGHTH))
    assert eighth.domain == "shifted" and eighth.reason.startswith("band: ")
    assert "band250_p10" in eighth.reason and "band1000" not in eighth.reason


def test_the_shares_round_trip_and_an_older_file_keeps_the_older_rule(
        detector: StatsDetector, tmp_path: Path) -> None:
    path = tmp_path / "stats.pt"
    save_stats_detector(path, detector)
    back = load_any_detector(path)
    assert isinstance(back, StatsDetector)
    np.testing.assert_array_equal(back.missing_share, detector.missing_share)
    half = _stats(np.random.default_rng(8), True, HALF)
    assert back.domain(half).domain == "in"
    raw = torch.load(path, weights_only=True)
    assert raw["kind_version"] == 3
    del raw["missing_share"]                           # as a file written before the field
    raw["kind_version"] = 1
    torch.save(raw, tmp_path / "old.pt")
    old = load_any_detector(tmp_path / "old.pt")
    assert old.missing_share is None
    check = old.domain(half)
    assert check.domain == "shifted" and check.reason.startswith("band: 6 of ")
    np.testing.assert_array_equal(old.probability(half[None]), back.probability(half[None]))


@pytest.mark.parametrize("bad", [[0.1, 0.2], "many", [2.0] * len(stat_names(SPEC))])
def test_a_damaged_share_is_one_error_naming_the_file(detector: StatsDetector, tmp_path: Path,
                                                      bad: object) -> None:
    path = tmp_path / "stats.pt"
    save_stats_detector(path, detector)
    raw = torch.load(path, weights_only=True)
    raw["missing_share"] = bad
    torch.save(raw, path)
    with pytest.raises(DataError, match=str(path)):
        load_any_detector(path)
