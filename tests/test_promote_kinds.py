"""`leakpipe promote` across detector kinds: a `logger_stats` candidate against a `cnn` champion
and the other way round, each deciding the test split's recordings at its own operating point,
one verdict per recording, compared by the paired bootstrap over recordings.

Real pieces: one test split holding both what a CNN reads (log-mel clips whose known-detector
probabilities are chosen, ``tests.helpers_detector``) and what a logger_stats detector reads (the
recording statistics of generated recordings), detector files of both kinds (the statistics
model fitted by the project's own fit), each logged and registered as ship does, a real SQLite
MLflow store and the real command.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from leakpipe import tracking
from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.baselines.logger_stats import fit_net
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.constants import KNOWN_CLASSES, LEAK_CLASS
from leakpipe.data.writer import SplitWriter, StatsColumns
from leakpipe.decision.calibration import IDENTITY
from leakpipe.evaluate.promotion import EXIT_REFUSED
from leakpipe.features.recording_stats import recording_stats, stat_names
from leakpipe.serve.model import log_served_detector
from leakpipe.stats_detector import KIND, StatsDetector, save_stats_detector
from leakpipe.stats_model import LoggerStatsNet
from tests.conftest import PARAMS
from tests.helpers_detector import (
    SMALL_FEATURES,
    copied_store,
    known_detector,
    one_torch_thread,
    prob_to_value,
    restore_logging,
    write_plan,
)
from tests.test_ship import RATE, SPEC, _recording

NAME = load_section(PARAMS, "evaluate").registered_model
SITES, PER_SITE, CLIPS = 8, 3, 2       # test split: 24 recordings of two clips each

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)


def _test_split(path: Path) -> Path:
    """Even sites leak; a leak recording's clips score 0.9 under the known CNN, the others 0.1;
    every recording carries the statistics of a generated recording of its class."""
    rng = np.random.default_rng(3)
    leak = KNOWN_CLASSES.index(LEAK_CLASS)
    columns = StatsColumns(stat_names(SPEC), SPEC.to_dict())
    shape = SMALL_FEATURES.segment_shape
    with SplitWriter(path, "test", SMALL_FEATURES, KNOWN_CLASSES, dtype="float32",
                     chunk_mb=0.01, stats=columns) as writer:
        for site in range(SITES):
            is_leak = site % 2 == 0
            value = float(prob_to_value(np.array(0.9 if is_leak else 0.1))[()])
            for k in range(PER_SITE):
                mel = np.full((CLIPS, *shape), value, np.float32)
                writer.append(mel, leak if is_leak else KNOWN_CLASSES.index("NORMAL"),
                              f"test/s{site}/{k}", f"site{site}",
                              stats=recording_stats(_recording(rng, is_leak), RATE, SPEC),
                              rate=RATE)
    return path


def _stats_detector(path: Path, *, inverted: bool = False) -> Path:
    """A logger_stats detector fitted on recordings of other sites (``inverted``: its
    coefficients negated, so it calls the traffic sites leaks)."""
    rng = np.random.default_rng(17)
    truth = np.array([i % 2 == 0 for i in range(16)])
    x = np.stack([recording_stats(_recording(rng, bool(t)), RATE, SPEC) for t in truth])
    net = fit_net(x, truth, 1.0, stat_names(SPEC))
    if inverted:
        weight = net.linear.weight.detach().numpy()[0]
        net = LoggerStatsNet(net.mean.numpy(), net.scale.numpy(), -weight,
                             -float(net.linear.bias.detach()[0]), net.names)
    save_stats_detector(path, StatsDetector(net=net.eval(), stats=SPEC, threshold=0.5,
                                            calibration=IDENTITY, metrics={},
                                            quality=DEAD_ONLY))
    return path


def _register(path: Path) -> str:
    """What ship does with the detector file it shipped: log it, a version, alias candidate."""
    with tracking.start_run("ship") as run:
        uri = log_served_detector(path)
        kind = "cnn" if path.stem.startswith("cnn") else KIND
        version = tracking.register_detector(uri, NAME, {tracking.TAG_SHIP_RUN: run.run_id,
                                                         tracking.TAG_DETECTOR_KIND: kind})
    tracking.set_alias(NAME, tracking.ALIAS_CANDIDATE, version)
    return version


def _champion() -> str | None:
    found = tracking.alias_version(NAME, tracking.ALIAS_CHAMPION)
    return found.version if found else None


def _last_promote_run() -> object:
    import mlflow

    return mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.`{tracking.TAG_STAGE}` = 'promote'",
                              order_by=["attributes.start_time DESC"])[0]


def test_promote_compares_detectors_of_either_kind_recording_by_recording(
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

    blind_cnn = known_detector(tmp_path / "cnn_blind.pt", threshold=0.99)   # nothing is a leak
    good_cnn = known_detector(tmp_path / "cnn_good.pt", threshold=0.5)      # every call right
    stats = _stats_detector(tmp_path / "stats.pt")
    inverted = _stats_detector(tmp_path / "stats_inverted.pt", inverted=True)

    assert _register(blind_cnn) == "1" and promote() == 0 and _champion() == "1"

    assert _register(stats) == "2"                        # logger_stats over a cnn champion
    capsys.readouterr()
    assert promote() == 0 and _champion() == "2"
    out = capsys.readouterr().out
    assert f"{NAME} v2 is now champion (was v1)" in out
    assert f"on {SITES * PER_SITE} test recordings" in out
    run = _last_promote_run()
    assert run.data.params["candidate_kind"] == KIND and run.data.params["champion_kind"] == "cnn"
    assert run.data.metrics["promote/champion_recording_f1"] == 0.0
    assert run.data.metrics["promote/candidate_recording_f1"] > 0.8
    assert run.data.metrics["promote/test_recordings"] == SITES * PER_SITE

    assert _register(blind_cnn) == "3"                    # a worse cnn against it: refused
    capsys.readouterr()
    assert promote() == EXIT_REFUSED and _champion() == "2"
    assert f"promote: refused: {NAME} v3 stays candidate, champion stays v2" in \
        capsys.readouterr().err

    assert _register(good_cnn) == "4"                     # a cnn over a logger_stats champion
    assert promote() == 0 and _champion() == "4"
    run = _last_promote_run()
    assert (run.data.params["candidate_kind"], run.data.params["champion_kind"]) == ("cnn", KIND)
    assert run.data.metrics["promote/candidate_recording_f1"] == 1.0
    assert run.data.metrics["promote/recording_f1_diff_ci_low"] >= 0.0

    assert _register(inverted) == "5"                     # a worse logger_stats: refused
    assert promote() == EXIT_REFUSED and _champion() == "4"
    assert _last_promote_run().data.metrics["promote/recording_f1_diff_ci_high"] < 0


def test_a_split_without_statistics_stops_a_logger_stats_comparison(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    monkeypatch.chdir(tmp_path)
    test = tmp_path / "test.h5"
    with SplitWriter(test, "test", SMALL_FEATURES, KNOWN_CLASSES, chunk_mb=0.01) as writer:
        for r in range(4):
            writer.append(np.zeros((1, *SMALL_FEATURES.segment_shape), np.float32), r % 3,
                          f"test/r{r}", f"site{r}")
    _register(known_detector(tmp_path / "cnn_blind.pt", threshold=0.99))
    tracking.set_alias(NAME, tracking.ALIAS_CHAMPION, "1")
    _register(_stats_detector(tmp_path / "stats.pt"))
    capsys.readouterr()
    code = main(["promote", "--params", str(PARAMS), "--no-progress", "--test", str(test),
                 "--plan", str(write_plan(tmp_path / "preload.json")), "--unvalidated"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err
    assert f"{NAME} v2 (candidate): {test}: the split holds no recording statistics" in err
    assert _champion() == "1"
