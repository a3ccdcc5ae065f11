"""The model card of a `logger_stats` detector (leakpipe/evaluate/stats_card.py): what it reads,
the statistics it uses and their largest coefficients in order, its operating point, its val and
test figures per recording, what its domain check flagged; the same bytes for the same inputs."""

from __future__ import annotations

import dataclasses

import numpy as np

from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.config import RecordingStatsConfig
from leakpipe.decision.calibration import IDENTITY
from leakpipe.decision.stats_domain import shifted_shares
from leakpipe.evaluate.stats_card import StatsCardInputs, stats_model_card
from leakpipe.features.recording_stats import stat_names
from leakpipe.stats_detector import StatsDetector
from leakpipe.stats_model import LoggerStatsNet

SPEC = RecordingStatsConfig(frame_s=0.125, percentiles=(10.0, 50.0, 90.0),
                            band_centres_hz=(250.0, 1000.0), floor_db=-160.0)
USED = ("level_p10", "level_spread", "band1000_rel")
COEF = np.array([0.5, -2.0, 1.25])                  # by size: spread, rel, p10


def _inputs(**changes: object) -> StatsCardInputs:
    net = LoggerStatsNet(np.array([-45.0, 15.0, 2.0]), np.array([9.7, 13.8, 3.0]), COEF, -0.25,
                         USED)
    detector = StatsDetector(net=net.eval(), stats=SPEC, threshold=0.42, calibration=IDENTITY,
                             metrics={}, quality=DEAD_ONLY)
    metrics = {"val/recording_f1": 0.8, "val/recordings": 40.0, "val/sites": 10.0,
               "test/recording_f1": 0.75, "test/recording_f1_ci_low": 0.6,
               "test/recording_f1_ci_high": 0.88, "test/recording_roc_auc": 0.9,
               "test/recordings": 30.0, "test/sites": 8.0, "eval/C": 0.1}
    stats = np.array([[-45.0, 15.0, 2.0]] * 9 + [[-45.0 - 10 * 9.7, 15.0, 2.0]])   # 1 far
    base = StatsCardInputs(
        detector=detector, metrics=metrics, criterion="max_f1", confidence=0.95,
        detector_sha="ab" * 32, split_sha={"train": "11" * 32, "val": "22" * 32,
                                            "test": "33" * 32},
        source="data/raw", domain=shifted_shares(net.mean.numpy(), net.scale.numpy(),
                                                 {"val": stats[:9], "test": stats}))
    return dataclasses.replace(base, **changes)


def _section(card: str, title: str) -> str:
    return card.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_card_says_what_the_detector_reads_and_weighs() -> None:
    card = stats_model_card(_inputs())
    assert card.startswith(f"# Model card: logger_stats detector {'ab' * 6}\n")
    model = _section(card, "Model")
    assert "frames of 0.125 s, level percentiles 10, 50, 90" in model
    assert "per octave band at 250, 1000 Hz, floor -160 dB" in model
    assert f"Uses 3 of the {len(stat_names(SPEC))} statistics" in model
    assert "L2 logistic regression (C 0.1): `level_p10`, `level_spread`, `band1000_rel`." in model
    assert "threshold 0.4200 on `leak_prob` (Platt-calibrated; raw model probability 0.4200)" \
        in model
    assert "chosen by max_f1" in model and "(`build.quality.reject`): dead" in model
    rows = [line.split("|")[1].strip() for line in model.splitlines()
            if line.startswith("| ") and not line.startswith("| statistic")]
    assert rows == ["level_spread", "band1000_rel", "level_p10"]        # largest |coef| first
    assert "| level_spread | -2.000 | 15.00 | 13.80 |" in model and "bias -0.250" in model


def test_the_card_gives_val_and_test_figures_per_recording_and_the_domain_shares() -> None:
    card = stats_model_card(_inputs())
    figures = _section(card, "Figures per recording")
    assert "(val: 40 recordings at 10 sites, test: 30 recordings at 8 sites)" in figures
    assert "| F1 | 0.800 | 0.750 [0.600, 0.880] |" in figures
    assert "| ROC-AUC | n/a | 0.900 |" in figures                      # val's not given: n/a
    domain = _section(card, "Domain check")
    assert "more than 6 training standard deviations" in domain
    assert "val 0 of 9 (0.0 %" in domain and "test 1 of 10 (10.0 %" in domain
    data = _section(card, "Data")
    assert f"train split sha256 {'1' * 12}, val split sha256 {'2' * 12}" in data
    assert f"test split sha256 {'3' * 12}" in data


def test_the_same_inputs_give_the_same_bytes_and_no_domain_figures_say_nothing() -> None:
    assert stats_model_card(_inputs()) == stats_model_card(_inputs())
    card = stats_model_card(_inputs(domain={}, split_sha={}))
    assert "Flagged here" not in _section(card, "Domain check")
    assert "sha256" not in _section(card, "Data")
