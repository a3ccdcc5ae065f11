"""The `logger_stats` domain check (leakpipe/decision/stats_domain.py): a recording is shifted
when a statistic lies more than Z_LIMIT train standard deviations out, or a statistic the
detector reads is missing that training lacked on fewer than MIN_MISSING_SHARE of its recordings
(any missing statistic for a detector without those shares); a small table of cases, and the
flagged shares with their interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leakpipe.decision.stats_domain import (
    MIN_MISSING_SHARE,
    Z_LIMIT,
    assess_stats,
    missing_shares,
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


# -- missing statistics that training lacked too ---------------------------------------------------

LEARNT = np.array([0.0, 0.0, MIN_MISSING_SHARE])       # band1000_rel missing on 5 % of training
NEVER = np.zeros(3)                                    # training never lacked a statistic


def test_a_band_training_lacked_often_enough_is_in_one_it_never_lacked_is_shifted() -> None:
    values = np.array([-40.0, 10.0, math.nan])
    learnt = assess_stats(MEAN, SCALE, NAMES, values, LEARNT)
    assert (learnt.domain, learnt.reason) == ("in", "")
    assert learnt.distance == pytest.approx(0.0)
    rare = assess_stats(MEAN, SCALE, NAMES, values, np.array([0.0, 0.0, 0.049]))
    assert rare.domain == "shifted"
    never = assess_stats(MEAN, SCALE, NAMES, values, NEVER)
    assert never.domain == "shifted"
    assert never.reason.startswith("band: 1 of 3 statistics missing that training lacked on "
                                   "under 5% of its recordings (band1000_rel;")
    # the z rule stays: a learnt missing band does not hide a statistic far out
    far = assess_stats(MEAN, SCALE, NAMES, np.array([-40.0 - 9 * 8, 10.0, math.nan]), LEARNT)
    assert far.domain == "shifted" and far.reason.startswith("statistic: level_p10 -9.0")


def test_the_reason_names_only_the_statistics_training_did_not_lack() -> None:
    values = np.array([math.nan, 10.0, math.nan])
    check = assess_stats(MEAN, SCALE, NAMES, values, LEARNT)
    assert check.domain == "shifted"
    assert "(level_p10;" in check.reason and "band1000_rel" not in check.reason
    assert check.reason.startswith("band: 1 of 3")


def test_without_shares_any_missing_statistic_is_shifted_as_before() -> None:
    values = np.array([[-40.0, 10.0, math.nan], [-40.0, 10.0, 5.0]])
    assert shifted(MEAN, SCALE, values).tolist() == [True, False]
    assert shifted(MEAN, SCALE, values, LEARNT).tolist() == [False, False]
    assert shifted(MEAN, SCALE, values, NEVER).tolist() == [True, False]
    old = assess_stats(MEAN, SCALE, NAMES, values[0])
    assert old.domain == "shifted" and old.reason.startswith("band: 1 of 3 statistics missing (")


def test_missing_shares_of_a_training_table_and_the_flagged_shares_under_them() -> None:
    train = np.tile(MEAN, (20, 1))
    train[:2, 2] = math.nan                                         # 10 %: learnt
    train[:1, 0] = math.nan                                         # 5 %: learnt, just
    np.testing.assert_allclose(missing_shares(train), [0.05, 0.0, 0.1])
    assert missing_shares(np.empty((0, 3))).tolist() == [0.0, 0.0, 0.0]
    test = np.tile(MEAN, (4, 1))
    test[0, 2] = test[1, 0] = math.nan
    test[2, 1] = math.nan                                           # never missing in training
    before = shifted_shares(MEAN, SCALE, {"test": test})
    after = shifted_shares(MEAN, SCALE, {"test": test}, missing_shares(train))
    assert before["domain/test_shifted_rate"] == 0.75
    assert after["domain/test_shifted_rate"] == 0.25
