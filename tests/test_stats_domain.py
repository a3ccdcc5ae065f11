"""The `logger_stats` domain check (leakpipe/decision/stats_domain.py): a recording is shifted
when a statistic lies more than Z_LIMIT train standard deviations out, or a statistic the
detector reads is missing; a small table of cases, and the flagged shares with their interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leakpipe.decision.stats_domain import (
    Z_LIMIT,
    assess_stats,
    shifted,
    shifted_shares,
    stats_distances,
)

MEAN = np.array([-40.0, 10.0, 5.0])
SCALE = np.array([8.0, 4.0, 2.0])
NAMES = ("level_p10", "level_spread", "band1000_rel")


@pytest.mark.parametrize(("values", "domain", "reason"), [
    ([-40.0, 10.0, 5.0], "in", ""),                                  # the train mean itself
    ([-40.0 + 5.9 * 8, 10.0, 5.0], "in", ""),                        # 5.9 sd: inside
    ([-40.0 - 6.5 * 8, 10.0, 5.0], "shifted", "statistic: level_p10 -6.5 train sd"),
    ([-40.0, 10.0, 5.0 + 7 * 2], "shifted", "statistic: band1000_rel +7.0 train sd"),
    ([-40.0, 10.0, math.nan], "shifted", "band: 1 of 3 statistics missing"),
    ([-40.0 - 9 * 8, 10.0, math.nan], "shifted", "band: 1 of 3"),    # band first, as the CNN's
])
def test_one_recording(values: list[float], domain: str, reason: str) -> None:
    check = assess_stats(MEAN, SCALE, NAMES, np.array(values))
    assert check.domain == domain
    assert check.reason.startswith(reason)
    if domain == "in":
        assert check.distance <= 1.0


def test_distance_is_the_worst_present_statistic_over_the_limit() -> None:
    stats = np.array([[-40.0 + 3 * 8, 10.0 - 2 * 4, math.nan],        # |z| 3, 2, missing
                      [math.nan, math.nan, math.nan]])
    d = stats_distances(MEAN, SCALE, stats)
    assert d[0] == pytest.approx(3 / Z_LIMIT) and math.isnan(d[1])
    assert shifted(MEAN, SCALE, stats).tolist() == [True, True]       # both miss a statistic


def test_flagged_shares_with_their_interval() -> None:
    inside = np.tile(MEAN, (9, 1))
    far = MEAN + np.array([0.0, 10 * 4, 0.0])                         # 10 sd out
    shares = shifted_shares(MEAN, SCALE, {"val": inside, "test": np.vstack([inside, far])})
    assert shares["domain/val_shifted_rate"] == 0.0 and shares["domain/val_recordings"] == 9
    assert shares["domain/test_shifted_rate"] == pytest.approx(0.1)
    assert 0.0 < shares["domain/test_shifted_rate_ci_low"] < 0.1 < \
        shares["domain/test_shifted_rate_ci_high"]
