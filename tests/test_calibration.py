"""Calibrated leak probabilities: Platt scaling, ECE / Brier, the detector file, predict's rows."""

from __future__ import annotations

import csv
import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from leakpipe.constants import BINARY_CLASSES
from leakpipe.decision.calibration import (
    IDENTITY,
    Calibration,
    brier_score,
    expected_calibration_error,
    fit_platt,
    reliability,
)
from leakpipe.decision.metrics import roc_auc
from leakpipe.decision.verdict import DECIMALS
from leakpipe.detector import load_detector, save_detector
from leakpipe.errors import DataError
from leakpipe.files import save_torch_atomic
from leakpipe.model import create_model
from leakpipe.predict.clips import predict
from leakpipe.predict.rules import scoring_rules
from leakpipe.runtime import cpu_runtime
from tests.conftest import PARAMS
from tests.helpers_detector import SMALL_MODEL, one_torch_thread, save_small_detector
from tests.helpers_h5 import SMALL_FEATURES

_one_thread = pytest.fixture(autouse=True)(one_torch_thread)
PLATT = Calibration(method="platt", slope=2.5, intercept=1.2, fitted_on=40, note="")


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def test_ece_and_brier_on_known_inputs() -> None:
    probs = np.array([0.05, 0.15, 0.95, 0.95])   # bins 0, 1, 9, 9 of ten equal-width bins
    truth = np.array([0, 1, 1, 1])
    # gaps |mean prob - leak share|: 0.05 (1 item), 0.85 (1 item), 0.05 (2 items)
    assert expected_calibration_error(probs, truth) == pytest.approx((0.05 + 0.85 + 0.1) / 4)
    assert brier_score(probs, truth) == pytest.approx((0.05**2 + 0.85**2 + 2 * 0.05**2) / 4)
    bins = reliability(probs, truth)
    assert bins.count.tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    assert np.isnan(bins.observed[2]) and bins.observed[9] == 1.0
    # 0 and 1 fall into the first and last bin; half leaks at 0.5 is perfectly calibrated
    assert reliability(np.array([0.0, 1.0]), np.array([0, 1])).count[[0, 9]].tolist() == [1, 1]
    assert expected_calibration_error(np.full(4, 0.5), np.array([0, 1, 0, 1])) == 0.0
    assert np.isnan(expected_calibration_error(np.array([]), np.array([])))


def test_platt_recovers_known_parameters() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 2.0, 20000)                          # logit of the score
    truth = rng.random(z.size) < _sigmoid(2.0 * z - 1.0)     # true map: a = 2, b = -1
    fitted = fit_platt(_sigmoid(z), truth)
    assert fitted.method == "platt" and fitted.fitted_on == z.size
    assert fitted.slope == pytest.approx(2.0, abs=0.1)
    assert fitted.intercept == pytest.approx(-1.0, abs=0.1)
    raw = _sigmoid(z)
    assert expected_calibration_error(fitted.prob(raw), truth) < 0.02 < \
        expected_calibration_error(raw, truth)


def test_separable_val_gives_finite_parameters_and_no_ranking_gives_the_identity() -> None:
    scores = np.r_[np.full(50, 0.1), np.full(50, 0.4)]
    truth = np.r_[np.zeros(50), np.ones(50)]
    fitted = fit_platt(scores, truth)                  # Platt's smoothed targets keep it finite
    assert fitted.method == "platt" and 0 < fitted.slope < 100
    assert fitted.prob(0.4) < 1.0 and fitted.prob(0.1) > 0.0
    assert "rank leaks below" in fit_platt(scores, 1 - truth).note
    one_class = fit_platt(scores, np.zeros(100))
    assert one_class.method == "identity" and one_class.note == "val holds no leaks"
    assert one_class.prob(0.26) == 0.26                # the identity is the raw score


def test_calibration_is_increasing_so_ranking_and_decisions_are_unchanged() -> None:
    rng = np.random.default_rng(1)
    scores = rng.random(2000)
    truth = rng.random(2000) < scores
    grid = np.linspace(0.0, 1.0, 2001)
    assert np.all(np.diff(PLATT.prob(grid[1:-1])) > 0)
    assert roc_auc(truth, PLATT.prob(scores)) == roc_auc(truth, scores)
    for threshold in (0.02, 0.26, 0.5, 0.98):
        np.testing.assert_array_equal(PLATT.prob(scores) >= PLATT.prob(threshold),
                                      scores >= threshold)


def test_detector_round_trip_with_and_without_calibration(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    path = save_small_detector(tmp_path / "d.pt",
                               create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval(), "none")
    plain = load_detector(path)
    assert plain.calibration == IDENTITY and plain.prob_threshold == plain.threshold
    save_detector(tmp_path / "cal.pt", dataclasses.replace(plain, calibration=PLATT))
    calibrated = load_detector(tmp_path / "cal.pt")
    assert calibrated.calibration == PLATT
    assert calibrated.prob_threshold == pytest.approx(_sigmoid(1.2))   # logit(0.5) = 0
    raw = torch.load(path, weights_only=True)
    del raw["calibration"]
    save_torch_atomic({**raw, "version": 3}, tmp_path / "v3.pt")       # before calibration
    with caplog.at_level(logging.WARNING, logger="leakpipe.detector"):
        old = load_detector(tmp_path / "v3.pt")
    assert old.calibration.method == "identity" and "version 4" in old.calibration.note
    assert "uncalibrated" in caplog.text and old.leak_prob(0.3) == 0.3
    save_torch_atomic({**raw, "calibration": {**PLATT.to_dict(), "slope": -1.0}},
                      tmp_path / "bad.pt")
    with pytest.raises(DataError, match=r"bad\.pt: calibration: slope must be"):
        load_detector(tmp_path / "bad.pt")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_predict_reports_calibrated_probabilities_with_unchanged_decisions(
        tmp_path: Path) -> None:
    rate = SMALL_FEATURES.sample_rate
    rng = np.random.default_rng(0)
    for i, amplitude in enumerate((0.001, 0.05, 0.3, 1.0, 3.0)):
        sf.write(tmp_path / f"r{i}.wav", (amplitude * rng.standard_normal(rate)).astype(
            np.float32), rate, subtype="FLOAT")
    torch.manual_seed(0)
    plain = load_detector(save_small_detector(
        tmp_path / "d.pt", create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval(), "none"))
    files = sorted(tmp_path.glob("r*.wav"))
    rows = {}
    for name, cal in (("plain", IDENTITY), ("calibrated", PLATT)):
        detector = dataclasses.replace(plain, calibration=cal)
        predict(files, detector, tmp_path / f"{name}.csv", runtime=cpu_runtime(),
                rules=scoring_rules(detector, PARAMS), progress=False)
        rows[name] = _rows(tmp_path / f"{name}.csv")
    scores = np.array([float(r["leak_prob"]) for r in rows["plain"]])
    for before, after, score in zip(rows["plain"], rows["calibrated"], scores, strict=True):
        assert after["decision"] == before["decision"]
        assert after["frac_long_over"] == before["frac_long_over"]
        assert float(after["leak_prob"]) == pytest.approx(PLATT.prob(score), abs=2e-3)
        # shown at DECIMALS digits, as leak_prob is: one scale, one precision
        assert float(after["threshold"]) == round(float(PLATT.prob(0.5)), DECIMALS)
        assert (float(after["leak_prob"]) >= float(after["threshold"])) == \
            (after["decision"] == "LEAK")
        assert float(before["threshold"]) == 0.5
    assert len({r["decision"] for r in rows["plain"]}) == 2   # both sides of the threshold
