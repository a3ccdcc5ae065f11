"""The model card of a `fused` detector (leakpipe/evaluate/fused_card.py): what both parts read,
the stacker's weights beside each part's own test ROC-AUC, the operating point on the stacked
probability, ship's val and test figures per recording, both parts' domain checks; the same
bytes for the same inputs, and short enough to be the registered version's description."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.config import RecordingStatsConfig, load_section
from leakpipe.decision import domain as dm
from leakpipe.decision.calibration import IDENTITY
from leakpipe.decision.stacking import Stacker
from leakpipe.decision.stats_domain import shifted_shares
from leakpipe.detector import load_detector
from leakpipe.evaluate.fused_card import FusedCardInputs, fused_model_card
from leakpipe.features.recording_stats import stat_names
from leakpipe.stats_detector import FUSED_PARTS, FusedDetector, StatsDetector
from leakpipe.stats_model import LoggerStatsNet
from leakpipe.tracking.models import DESCRIPTION_CHARS
from tests.conftest import PARAMS
from tests.helpers_detector import known_detector

SPEC = RecordingStatsConfig(frame_s=0.125, percentiles=(10.0, 50.0, 90.0),
                            band_centres_hz=(250.0, 1000.0), floor_db=-160.0)
USED = ("level_p10", "level_spread", "band1000_rel")
WHY_CHARS = 400            # "## Why this kind" as ship appends it when cv selected the kind: ~330


def _stats(spec: RecordingStatsConfig = SPEC, names: tuple[str, ...] = USED) -> StatsDetector:
    n = len(names)
    net = LoggerStatsNet(np.full(n, -45.0), np.full(n, 9.7), np.linspace(-2.0, 1.25, n), -0.25,
                         names)
    return StatsDetector(net=net.eval(), stats=spec, threshold=0.42, calibration=IDENTITY,
                         metrics={}, quality=DEAD_ONLY)


def _inputs(tmp_path: Path, **changes: object) -> FusedCardInputs:
    cnn = load_detector(known_detector(tmp_path / "cnn.pt", threshold=0.6))
    stats = _stats()
    detector = FusedDetector(cnn=cnn, logger_stats=stats,
                             stacker=Stacker(FUSED_PARTS, (1.25, 0.5), -0.125), threshold=0.35,
                             calibration=IDENTITY, metrics={})
    metrics = {"val/recording_f1": 0.8, "val/recordings": 40.0, "val/sites": 10.0,
               "test/recording_f1": 0.75, "test/recording_f1_ci_low": 0.6,
               "test/recording_f1_ci_high": 0.88, "test/recording_roc_auc": 0.93,
               "test/recordings": 30.0, "test/sites": 8.0, "eval/C": 0.1,
               "test/cnn_recording_roc_auc": 0.91, "test/logger_stats_recording_roc_auc": 0.84}
    values = np.array([[-45.0] * 3] * 9 + [[-45.0 - 10 * 9.7, -45.0, -45.0]])     # 1 far
    base = FusedCardInputs(
        detector=detector, metrics=metrics, criterion="max_f1", confidence=0.95,
        fusion_c=1.0, detector_sha="cd" * 32,
        split_sha={"train": "11" * 32, "val": "22" * 32, "test": "33" * 32}, source="data/raw",
        domain=shifted_shares(stats.net.mean.numpy(), stats.net.scale.numpy(),
                              {"val": values[:9], "test": values}))
    return dataclasses.replace(base, **changes)


def _section(card: str, title: str) -> str:
    return card.split(f"#{title}", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_the_card_says_what_both_parts_read_and_how_they_are_weighed(tmp_path: Path) -> None:
    card = fused_model_card(_inputs(tmp_path))
    assert card.startswith(f"# Model card: fused detector {'cd' * 6}\n")
    model = _section(card, "# Model")
    assert "`detector.fusion_C` 1, fitted on the val recordings" in model
    assert "times its weight to its bias (-0.125)" in model
    assert "| cnn | +1.250 | 0.910 |" in model and "| logger_stats | +0.500 | 0.840 |" in model
    assert "threshold 0.3500 on `leak_prob` (Platt-calibrated; raw stacked probability " \
        "0.3500)" in model
    assert "chosen on val by max_f1" in model and "(`build.quality.reject`): dead" in model
    cnn = _section(card, "## CNN part")
    assert "LeakCNN on log-mel segments" in cnn and "`blend`, vote fraction 0.5" in cnn
    stats = _section(card, "## Statistics part")
    assert "frames of 0.125 s, level percentiles 10, 50, 90" in stats
    assert f"Uses 3 of the {len(stat_names(SPEC))} statistics" in stats
    assert "(C 0.1); the largest coefficients below." in stats
    rows = [line.split("|")[1].strip() for line in stats.splitlines()
            if line.startswith("| ") and not line.startswith("| statistic")]
    assert rows == ["level_p10", "band1000_rel", "level_spread"]        # largest |coef| first


def test_the_card_gives_ships_figures_and_both_domain_checks(tmp_path: Path) -> None:
    card = fused_model_card(_inputs(tmp_path))
    figures = _section(card, "# Figures per recording")
    assert "(val: 40 recordings at 10 sites, test: 30 recordings at 8 sites)" in figures
    assert "| F1 | 0.800 | 0.750 [0.600, 0.880] |" in figures
    assert "| ROC-AUC | n/a | 0.930 |" in figures
    domain = _section(card, "# Domain check")
    assert "Statistics part: A recording is `shifted`" in domain
    assert "val 0 of 9 (0.0 %" in domain and "test 1 of 10 (10.0 %" in domain
    assert "CNN part: none (its network has no domain reference)" in domain
    data = _section(card, "# Data")
    assert f"train split sha256 {'1' * 12}; val split sha256 {'2' * 12}" in data
    assert "the stacker, threshold and calibration on val" in data
    inputs = _inputs(tmp_path)
    rng = np.random.default_rng(0)
    profiles = rng.normal(-40.0, 3.0, (60, inputs.detector.cnn.features.n_mels))
    ref = dm.fit_threshold(dm.fit_reference(profiles[:40]), profiles[40:])
    with_ref = dataclasses.replace(inputs.detector,
                                   cnn=dataclasses.replace(inputs.detector.cnn, domain=ref))
    domain = _section(fused_model_card(dataclasses.replace(inputs, detector=with_ref)),
                      "# Domain check")
    assert f"CNN part: its band profile against evaluate's reference (threshold " \
           f"{ref.threshold:.3g}, set on val" in domain


def test_the_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    assert fused_model_card(_inputs(tmp_path)) == fused_model_card(_inputs(tmp_path))
    card = fused_model_card(_inputs(tmp_path, domain={}, split_sha={}))
    assert "Flagged here" not in _section(card, "# Domain check")
    assert "sha256" not in _section(card, "# Data")


@pytest.mark.parametrize("stats_of", ["params", "small"])
def test_the_card_fits_a_registry_description(tmp_path: Path, stats_of: str) -> None:
    """With the project's own build.stats (every statistic used), the card and ship's reason
    for the kind stay within what the registry keeps of a description."""
    spec = load_section(PARAMS, "build").stats if stats_of == "params" else SPEC
    inputs = _inputs(tmp_path)
    detector = dataclasses.replace(inputs.detector,
                                   logger_stats=_stats(spec, tuple(stat_names(spec))))
    card = fused_model_card(dataclasses.replace(inputs, detector=detector))
    assert len(card) + WHY_CHARS <= DESCRIPTION_CHARS
