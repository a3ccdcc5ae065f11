"""`leakpipe promote` with a `fused` detector on either side: it decides each test recording from
the split's stored features, its CNN part's recording score as `ship` computes it and its
statistics part's from the stored statistics, stacked at its own threshold; a split built with
other statistics settings stops the comparison, as for a `logger_stats` detector.

Real pieces: test_promote_kinds' test split (log-mel clips with chosen known-CNN probabilities
and the statistics of generated recordings), detector files of every kind (the statistics model
fitted by the project's own fit), each logged and registered as ship does, a real SQLite MLflow
store and the real command.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from leakpipe import tracking
from leakpipe.baselines.logger_stats import read_recordings
from leakpipe.cli import main
from leakpipe.config import RecordingStatsConfig, load_section
from leakpipe.decision.calibration import IDENTITY
from leakpipe.decision.stacking import Stacker
from leakpipe.detector import load_detector
from leakpipe.detectors.registry import load_any_detector
from leakpipe.evaluate.promotion import EXIT_REFUSED
from leakpipe.evaluate.promotion_scoring import (
    cnn_decisions,
    fused_decisions,
    scoring_setup,
    stats_decisions,
)
from leakpipe.serve.model import log_served_detector
from leakpipe.stats_detector import (
    FUSED_KIND,
    FUSED_PARTS,
    FusedDetector,
    save_fused_detector,
)
from tests.conftest import PARAMS
from tests.helpers_detector import (
    LIMITS,
    copied_store,
    known_detector,
    one_torch_thread,
    restore_logging,
    write_plan,
)
from tests.test_promote_kinds import (
    CLIPS,
    NAME,
    PER_SITE,
    SITES,
    _champion,
    _last_promote_run,
    _stats_detector,
    _test_split,
)
from tests.test_ship import SPEC

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)


def _fused(path: Path, cnn: Path, stats: Path, weights: tuple[float, float], *,
           spec: RecordingStatsConfig = SPEC) -> Path:
    """A fused detector of the two detector files (the CNN given scoring rules so that it can
    serve; the statistics part's settings ``spec``), stacked with ``weights`` and no bias, at
    threshold 0.5."""
    part = dataclasses.replace(load_any_detector(stats), stats=spec)
    network = dataclasses.replace(load_detector(cnn), batch_limits=LIMITS, min_clip_fraction=0.5)
    save_fused_detector(path, FusedDetector(
        cnn=network, logger_stats=part, stacker=Stacker(FUSED_PARTS, weights, 0.0),
        threshold=0.5, calibration=IDENTITY, metrics={}))
    return path


def _register(path: Path, kind: str) -> str:
    """What ship does with the detector file it shipped: log it, a version, alias candidate."""
    with tracking.start_run("ship") as run:
        uri = log_served_detector(path)
        version = tracking.register_detector(uri, NAME, {tracking.TAG_SHIP_RUN: run.run_id,
                                                         tracking.TAG_DETECTOR_KIND: kind})
    tracking.set_alias(NAME, tracking.ALIAS_CANDIDATE, version)
    return version


def test_the_fused_decider_stacks_the_cnn_recording_score_and_the_stored_statistics(
        tmp_path: Path) -> None:
    """A stacker that weighs one part only decides as that part's own kind does; both parts
    weighed decide as the parts computed apart from promote (the CNN's by its clips' known
    probabilities, the statistics as the baselines read them) say."""
    test = _test_split(tmp_path / "test.h5")
    setup = scoring_setup(write_plan(tmp_path / "preload.json"),
                          load_section(PARAMS, "evaluate"), load_section(PARAMS, "runtime"),
                          progress=False)
    cnn_file = known_detector(tmp_path / "cnn.pt", threshold=0.5)
    stats_file = _stats_detector(tmp_path / "stats.pt")

    def fused(weights: tuple[float, float]) -> FusedDetector:
        return load_any_detector(_fused(tmp_path / "fused.pt", cnn_file, stats_file, weights))

    only_cnn = fused_decisions(fused((1.0, 0.0)), test, setup, "fused")
    cnn = cnn_decisions(load_detector(cnn_file), test, setup, "cnn")
    assert np.array_equal(only_cnn.recording_id, cnn.recording_id)
    assert np.array_equal(only_cnn.decision, cnn.decision) and only_cnn.f1 == 1.0
    only_stats = fused_decisions(fused((0.0, 1.0)), test, setup, "fused")
    stats = stats_decisions(load_any_detector(stats_file), test, setup, "stats")
    assert np.array_equal(only_stats.decision, stats.decision)
    assert np.array_equal(only_stats.truth, stats.truth)

    both = fused((1.0, 1.0))
    table = read_recordings(test)                                 # first-row order
    shape = (CLIPS, *both.cnn.features.segment_shape[:2])         # the known CNN's clips:
    cnn_prob = np.array([both.cnn_probability(np.full(shape, 0.9 if t else 0.1))   # 0.9, 0.1
                         for t in table.truth])
    expected = both.probability(cnn_prob, table.stats) >= both.threshold
    order = np.argsort(table.recording_id.astype(str), kind="stable")
    got = fused_decisions(both, test, setup, "fused")
    assert np.array_equal(got.recording_id, table.recording_id.astype(str)[order])
    assert np.array_equal(got.decision, expected[order])


def test_promote_decides_a_fused_detector_against_the_other_kinds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    monkeypatch.chdir(tmp_path)
    test = _test_split(tmp_path / "test.h5")
    plan = write_plan(tmp_path / "preload.json")

    def promote() -> int:
        return main(["promote", "--params", str(PARAMS), "--no-progress", "--test", str(test),
                     "--plan", str(plan), "--unvalidated"])

    cnn = known_detector(tmp_path / "cnn_good.pt", threshold=0.5)
    stats = _stats_detector(tmp_path / "stats.pt")
    inverted = _stats_detector(tmp_path / "stats_inverted.pt", inverted=True)
    blind_cnn = known_detector(tmp_path / "cnn_blind.pt", threshold=0.99)   # nothing a leak
    fused = _fused(tmp_path / "fused.pt", cnn, stats, (1.0, 1.0))

    assert _register(inverted, "logger_stats") == "1" and promote() == 0 and _champion() == "1"

    assert _register(fused, FUSED_KIND) == "2"            # fused over a logger_stats champion
    capsys.readouterr()
    assert promote() == 0 and _champion() == "2"
    assert f"{NAME} v2 is now champion (was v1)" in capsys.readouterr().out
    run = _last_promote_run()
    assert (run.data.params["candidate_kind"], run.data.params["champion_kind"]) == \
        (FUSED_KIND, "logger_stats")
    assert run.data.metrics["promote/candidate_recording_f1"] == 1.0
    assert run.data.metrics["promote/test_recordings"] == SITES * PER_SITE

    assert _register(blind_cnn, "cnn") == "3"             # a worse cnn against it: refused
    capsys.readouterr()
    assert promote() == EXIT_REFUSED and _champion() == "2"
    assert f"promote: refused: {NAME} v3 stays candidate, champion stays v2" in \
        capsys.readouterr().err
    run = _last_promote_run()
    assert (run.data.params["candidate_kind"], run.data.params["champion_kind"]) == \
        ("cnn", FUSED_KIND)
    assert run.data.metrics["promote/champion_recording_f1"] == 1.0

    # a fused detector whose statistics part was fitted on other settings than the split's
    other = _fused(tmp_path / "fused_other.pt", cnn, stats, (1.0, 1.0),
                   spec=dataclasses.replace(SPEC, floor_db=SPEC.floor_db + 10.0))
    assert _register(other, FUSED_KIND) == "4"
    capsys.readouterr()
    assert promote() == 3 and _champion() == "2"
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (f"{NAME} v4 (candidate): {test}: its recording statistics were computed with other "
            "settings") in err
