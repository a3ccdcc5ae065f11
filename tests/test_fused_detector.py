"""The `fused` detector file (leakpipe/stats_detector.py): a whole CNN detector, a whole
logger_stats detector and the stacker in one version-8 file that ``load_any_detector`` reads
back exactly; any damage is one ``DataError`` naming the file. Real tiny models: a CNN that
reads a band level, a statistics model fitted on real recordings' statistics."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from leakpipe.baselines.logger_stats import fit_net
from leakpipe.config import load_section
from leakpipe.decision.calibration import fit_platt
from leakpipe.decision.stacking import Stacker, logit, sigmoid
from leakpipe.decision.stats_domain import missing_shares
from leakpipe.decision.voting import file_scores
from leakpipe.detector import KINDED_VERSION, load_detector
from leakpipe.detectors.registry import load_any_detector
from leakpipe.errors import DataError
from leakpipe.features.recording_stats import recording_stats, stat_names
from leakpipe.stats_detector import (
    FUSED_KIND,
    FUSED_PARTS,
    FusedDetector,
    StatsDetector,
    save_fused_detector,
)
from tests.conftest import PARAMS
from tests.helpers_fused import level_reader
from tests.test_ship import RATE, SPEC, _recording


def _stats_detector() -> tuple[StatsDetector, np.ndarray]:
    """A logger_stats detector fitted on 16 recordings' statistics, and 4 others' (4, S)."""
    rng = np.random.default_rng(1)
    truth = np.tile([True, False], 10)
    stats = np.stack([recording_stats(_recording(rng, t), RATE, SPEC) for t in truth])
    net = fit_net(stats[:16], truth[:16], 0.1, stat_names(SPEC)).eval()
    detector = StatsDetector(net=net, stats=SPEC, threshold=0.5,
                             calibration=fit_platt(np.linspace(0.1, 0.9, 8),
                                                   np.tile([False, True], 4)),
                             metrics={"test/recording_f1": 0.75},
                             quality=load_section(PARAMS, "build").quality,
                             missing_share=missing_shares(stats[:16]))
    return detector, stats[16:]


@pytest.fixture
def fused(tmp_path: Path) -> FusedDetector:
    stats, _ = _stats_detector()
    return FusedDetector(cnn=load_detector(level_reader(tmp_path / "cnn.pt")), logger_stats=stats,
                         stacker=Stacker(FUSED_PARTS, (1.3, 0.7), -0.4), threshold=0.45,
                         calibration=fit_platt(np.linspace(0.05, 0.95, 10),
                                               np.repeat([False, True], 5)),
                         metrics={"test/recording_roc_auc": 0.9, "eval/threshold": 0.45})


def test_a_fused_file_loads_back_exactly(fused: FusedDetector, tmp_path: Path) -> None:
    path = tmp_path / "fused.pt"
    save_fused_detector(path, fused)
    back = load_any_detector(path)
    assert isinstance(back, FusedDetector) and back.kind == FUSED_KIND
    assert (back.stacker, back.threshold, back.calibration, back.metrics) == (
        fused.stacker, fused.threshold, fused.calibration, fused.metrics)
    assert back.cnn.voting == fused.cnn.voting and back.cnn.threshold == fused.cnn.threshold
    assert back.cnn.batch_limits == fused.cnn.batch_limits
    for a, b in zip(back.cnn.model.state_dict().values(),
                    fused.cnn.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert back.logger_stats.net.names == fused.logger_stats.net.names
    assert back.quality == fused.quality
    np.testing.assert_array_equal(back.logger_stats.missing_share,
                                  fused.logger_stats.missing_share)
    _, stats = _stats_detector()
    np.testing.assert_array_equal(back.probability(0.7, stats), fused.probability(0.7, stats))
    # one format for every kind: the file is version 8, its cnn part a CNN detector file's dict
    raw = torch.load(path, weights_only=True)
    assert (raw["format"], raw["version"], raw["kind"]) == ("leakpipe.detector",
                                                            KINDED_VERSION, FUSED_KIND)
    torch.save(raw["cnn"], tmp_path / "cnn_part.pt")
    assert load_detector(tmp_path / "cnn_part.pt").threshold == fused.cnn.threshold


def test_the_cnn_reader_refuses_a_fused_file_by_name(fused: FusedDetector,
                                                     tmp_path: Path) -> None:
    save_fused_detector(tmp_path / "fused.pt", fused)
    with pytest.raises(DataError, match="a fused detector; this reads CNN detectors only"):
        load_detector(tmp_path / "fused.pt")


def _damage(raw: dict, case: str) -> None:
    if case == "no_stacker":
        del raw["stacker"]
    elif case == "stacker_one_weight":
        raw["stacker"]["weights"] = [1.0]
    elif case == "stacker_parts_swapped":
        raw["stacker"]["names"] = ["logger_stats", "cnn"]
    elif case == "stacker_weight_nan":
        raw["stacker"]["weights"] = [float("nan"), 1.0]
    elif case == "cnn_weights_missing":
        del raw["cnn"]["model"]
    elif case == "cnn_not_a_dict":
        raw["cnn"] = torch.zeros(3)
    elif case == "stats_mean_missing":
        del raw["logger_stats"]["mean"]
    elif case == "threshold_nan":
        raw["threshold"] = float("nan")
    elif case == "calibration":
        raw["calibration"] = {"method": "platt"}


DAMAGE = ["no_stacker", "stacker_one_weight", "stacker_parts_swapped", "stacker_weight_nan",
          "cnn_weights_missing", "cnn_not_a_dict", "stats_mean_missing", "threshold_nan",
          "calibration", "truncated"]


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_fused_file_is_one_line_naming_it(fused: FusedDetector, tmp_path: Path,
                                                    case: str) -> None:
    path = tmp_path / "fused.pt"
    save_fused_detector(path, fused)
    if case == "truncated":
        path.write_bytes(path.read_bytes()[:2000])
    else:
        raw = torch.load(path, weights_only=True)
        _damage(raw, case)
        torch.save(raw, path)
    with pytest.raises(DataError) as caught:
        load_any_detector(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message


def test_the_stacked_logit_is_the_bias_plus_each_parts_evidence(fused: FusedDetector) -> None:
    _, stats = _stats_detector()
    for cnn_prob, row in zip((0.05, 0.5, 0.93, 1.0), stats, strict=True):
        evidence = fused.evidence(cnn_prob, row)
        assert list(evidence) == list(FUSED_PARTS)
        stats_logit = float(fused.logger_stats.logit(row[None, :])[0])
        assert evidence["cnn"] == pytest.approx(1.3 * float(logit(cnn_prob)))
        assert evidence["logger_stats"] == pytest.approx(0.7 * max(-13.8155, min(13.8155,
                                                                              stats_logit)))
        total = -0.4 + sum(evidence.values())
        assert float(fused.probability(cnn_prob, row[None, :])[0]) == pytest.approx(
            float(sigmoid(total)))
    # the statistics part's own probability, through its logit, is what the stacker reads
    p = fused.logger_stats.probability(stats)
    np.testing.assert_allclose(fused.part_logits(0.5, stats)[:, 1], logit(p), atol=1e-4)


@pytest.mark.parametrize("rule", ["long_vote", "frac_vote", "mean", "any_long"])
def test_the_cnn_part_is_the_mean_of_its_clips_rule_scores(fused: FusedDetector,
                                                           rule: str) -> None:
    import dataclasses

    cnn = dataclasses.replace(fused.cnn, voting=dataclasses.replace(fused.cnn.voting, rule=rule))
    detector = dataclasses.replace(fused, cnn=cnn)
    probs = np.random.default_rng(2).uniform(0, 1, (3, 7, 7)).astype(np.float32)
    expected = np.mean(file_scores(probs.astype(np.float64), rule, 0.5))
    assert detector.cnn_probability(probs) == pytest.approx(expected, abs=1e-12)
    assert math.isfinite(detector.cnn_probability(probs[:1]))
