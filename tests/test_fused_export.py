"""ONNX parity of the `fused` graph (leakpipe/export/fused_graph.py) for every voting rule and
input normalisation: onnxruntime on a recording's normalised segments and its statistics gives
the detector's own stacked probability (predict's scoring path, then the detector's float64
voting, mean and stacker), within the CNN export's 1e-4, with missing statistics and for one
clip or several. Real tiny models: a random-weight CNN with level features (batch norm in the
graph) and a statistics model fitted on real recordings' statistics."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from leakpipe.cli import main
from leakpipe.decision.calibration import Calibration
from leakpipe.decision.stacking import Stacker
from leakpipe.decision.voting import VotingConfig
from leakpipe.detector import load_detector
from leakpipe.errors import DataError
from leakpipe.export.fused_graph import OUTPUT, SEGMENTS, STATISTICS, as_segments, checked_onnx
from leakpipe.export.graph import TOLERANCE, cpu_session
from leakpipe.predict.scoring import score_segments
from leakpipe.runtime import make_runtime
from leakpipe.stats_detector import FUSED_PARTS, FusedDetector, save_fused_detector
from tests.helpers_detector import one_torch_thread
from tests.helpers_h5 import SMALL_FEATURES
from tests.test_export import detector_file
from tests.test_fused_detector import _stats_detector

_one_thread = pytest.fixture(autouse=True)(one_torch_thread)


def _fused(tmp_path: Path, rule: str, input_norm: str) -> FusedDetector:
    cnn = load_detector(detector_file(tmp_path / "cnn.pt", input_norm=input_norm))
    cnn = dataclasses.replace(cnn, voting=VotingConfig(prob_mode="blend", rule=rule,
                                                       vote_fraction=0.4))
    stats, _ = _stats_detector()
    return FusedDetector(cnn=cnn, logger_stats=stats,
                         stacker=Stacker(FUSED_PARTS, (2.5, 0.9), 0.3), threshold=0.5,
                         calibration=Calibration(), metrics={})


@pytest.mark.parametrize(("rule", "input_norm"), [
    ("long_vote", "clip_band"), ("frac_vote", "none"), ("mean", "clip_level"),
    ("any_long", "clip_band")])
def test_the_graph_gives_the_detectors_stacked_probability(tmp_path: Path, rule: str,
                                                            input_norm: str) -> None:
    detector = _fused(tmp_path, rule, input_norm)
    model, diff = checked_onnx(detector, "fused")
    assert diff <= TOLERANCE
    session = cpu_session(model)
    _, stats = _stats_detector()                                       # (4, S_all) recordings
    columns = detector.logger_stats.columns
    rng = np.random.default_rng(4)
    runtime = make_runtime("cpu")
    got, expected = [], []
    for i, clips in enumerate((1, 2, 5, 3)):
        mel = rng.uniform(-60.0, 10.0, (clips, *SMALL_FEATURES.segment_shape)).astype(np.float32)
        row = stats[i].astype(np.float32)
        if i % 2:
            row[columns[i]] = np.nan                                   # a band above Nyquist
        seg = score_segments(detector.cnn, detector.cnn.inference_model(), mel, runtime, 4096)
        expected.append(float(detector.probability(detector.cnn_probability(seg),
                                                   row[None, :])[0]))
        got.append(float(session.run([OUTPUT], {SEGMENTS: as_segments(mel, input_norm),
                                                STATISTICS: row[None, columns]})[0][0]))
    np.testing.assert_allclose(got, expected, atol=TOLERANCE)
    assert np.ptp(expected) > 1e-2                       # the recordings are told apart


def test_export_writes_the_graph_and_its_rules(tmp_path: Path) -> None:
    detector = _fused(tmp_path, "long_vote", "clip_band")
    save_fused_detector(tmp_path / "fused.pt", detector)
    out = tmp_path / "edge"
    assert main(["export", "--model", str(tmp_path / "fused.pt"), "--out", str(out)]) == 0
    rules = json.loads((out / "rules.json").read_text())
    assert rules["kind"] == "fused" and rules["input_norm"] == "clip_band"
    assert rules["onnx"]["inputs"][STATISTICS] == [1, len(rules["statistics"])]
    assert rules["onnx"]["inputs"][SEGMENTS][1:] == [1, SMALL_FEATURES.n_mels,
                                                     SMALL_FEATURES.n_frames]
    assert rules["in_graph"]["stacker"] == detector.stacker.to_dict()
    assert rules["in_graph"]["voting"]["rule"] == "long_vote"
    assert rules["prob_threshold"] == pytest.approx(detector.prob_threshold)


def test_a_cnn_part_without_an_onnx_form_is_refused(tmp_path: Path) -> None:
    detector = _fused(tmp_path, "long_vote", "none")
    cfg = dataclasses.replace(detector.cnn.model_cfg, tonal_median=3)
    detector = dataclasses.replace(detector, cnn=dataclasses.replace(detector.cnn,
                                                                     model_cfg=cfg))
    with pytest.raises(DataError, match="tonal_median"):
        checked_onnx(detector, "fused.pt")
