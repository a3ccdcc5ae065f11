"""`leakpipe adapt` for every detector kind, end to end: a real seed of each built-in kind
fitted as `ship` fits it, real HDF5 splits with recording statistics, real WAV pools and check
sets, real refits and a real MLflow SQLite store.

The world is helpers_fused's: a leak hisses all the time, a quiet site has bursts of traffic;
the CNN reads a band level (``level_reader``), the statistics and the fused detector are fitted
on the same splits. A round with the labelled train split as it is keeps the seed's val figure
and is accepted; with train's labels inverted (a wrong labelled set) it is rejected, and the
seed stands, for every kind.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from mlflow.tracking import MlflowClient

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.detector import load_detector
from leakpipe.detectors.registry import kind_of, load_any_detector
from leakpipe.runtime import make_runtime
from leakpipe.ship.fused_evaluation import evaluate_fused_detector
from leakpipe.ship.stats_evaluation import evaluate_stats_detector
from leakpipe.stats_detector import save_fused_detector, save_stats_detector
from tests.conftest import PARAMS
from tests.helpers_detector import one_torch_thread, restore_logging
from tests.helpers_fused import fused_splits, level_reader
from tests.test_ship import RATE, _recording

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)
KINDS = ("cnn", "logger_stats", "fused")
NAME = load_section(PARAMS, "evaluate").registered_model


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A seed detector of every kind, fitted on the world's right splits."""
    root = tmp_path_factory.mktemp("seeds")
    splits = fused_splits(root / "data")
    cnn = level_reader(root / "cnn.pt")
    sections = {name: load_section(PARAMS, name)
                for name in ("baselines", "evaluate", "decision", "build", "detector")}
    stats = evaluate_stats_detector(splits, sections["baselines"], sections["evaluate"],
                                    sections["decision"], sections["build"].quality)
    save_stats_detector(root / "logger_stats.pt", stats.detector)
    fused = evaluate_fused_detector(
        splits, load_detector(cnn), baselines=sections["baselines"], ev=sections["evaluate"],
        decision=sections["decision"], fusion_c=sections["detector"].fusion_C,
        quality=sections["build"].quality, runtime=make_runtime("cpu"))
    save_fused_detector(root / "fused.pt", fused.detector)
    return {"cnn": cnn, "logger_stats": root / "logger_stats.pt", "fused": root / "fused.pt"}


def _wavs(folder: Path, leaks: list[bool], seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, leak in enumerate(leaks):
        sf.write(folder / f"r{i}.wav", _recording(rng, leak), RATE, subtype="PCM_16")


def _project(root: Path, *, invert_train: bool, **adapt: object) -> Path:
    """Splits (train's labels inverted or not), pool, check set, plan and params."""
    fused_splits(root / "data", invert_train=invert_train)
    _wavs(root / "pool", [True, False, True, False, True, False], 5)
    _wavs(root / "check" / "LEAK", [True, True], 6)
    _wavs(root / "check" / "NORMAL", [False, False], 7)
    params = yaml.safe_load(PARAMS.read_text())
    params["runtime"]["device"] = "cpu"
    params["train"].update(binary=True, input_norm="none", batch_size=16)
    params["train"]["augment"]["enabled"] = False
    params["adapt"].update(source=str(root / "pool"), check=str(root / "check"),
                           pool_truth="", rounds=1, epochs=1, margin=0.0,
                           learning_rate=1e-4, tolerance=0.05, pseudo_per_labelled=1.0)
    params["adapt"].update(adapt)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    plan = {"placement": "ram", "dtype": "float32", "stream": {"buffer_chunks": 1},
            "params": params["preload"]}
    (root / "preload.json").write_text(json.dumps(plan))
    return root / "params.yaml"


def _adapt(root: Path, seed: Path) -> dict:
    data = root / "data"
    assert main(["adapt", "--params", str(root / "params.yaml"), "--detector", str(seed),
                 "--train", str(data / "train.h5"), "--val", str(data / "val.h5"),
                 "--plan", str(root / "preload.json"), "--work", str(root / "work"),
                 "--network", str(root / "out" / "adapted.pt"),
                 "--adapted", str(root / "out" / "adapted_detector.pt"),
                 "--metrics", str(root / "out" / "adapt.json"),
                 "--plots", str(root / "out" / "rounds.csv"),
                 "--figure", str(root / "out" / "rounds.png"),
                 "--no-progress", "--unvalidated"]) == 0
    return json.loads((root / "out" / "adapt.json").read_text())


def _adapted_kinds(store: str) -> list[str]:
    client = MlflowClient(store)
    return [v.tags.get(tracking.TAG_DETECTOR_KIND, "")
            for v in client.search_model_versions(f"name = '{NAME}'")
            if v.tags.get(tracking.TAG_ADAPTED) == "true"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_round_on_the_right_labels_is_accepted_and_refits_the_kind(
        kind: str, seeds: dict[str, Path], tmp_path: Path, mlflow_store: str) -> None:
    _project(tmp_path, invert_train=False)
    doc = _adapt(tmp_path, seeds[kind])
    assert [doc[f"round_{r}"]["status"] for r in (0, 1)] == ["seed", "accepted"]
    assert doc["final_round"] == 1
    seed_round, round_1 = doc["round_0"], doc["round_1"]
    assert round_1["val"]["f1"] >= seed_round["val"]["f1"] - 0.05    # within the tolerance
    assert seed_round["pseudo"]["leak"] + seed_round["pseudo"]["not_leak"] == 6
    adapted = load_any_detector(tmp_path / "out" / "adapted_detector.pt")
    seed = load_any_detector(seeds[kind])
    assert kind_of(adapted).name == kind == kind_of(seed).name
    part = {"cnn": lambda d: d.model.state_dict(), "logger_stats": lambda d: d.net.state_dict(),
            "fused": lambda d: d.logger_stats.net.state_dict()}[kind]
    before, after = part(seed), part(adapted)
    assert any(not np.allclose(before[k].numpy(), after[k].numpy()) for k in before)  # refitted
    assert (tmp_path / "out" / "adapted.pt").exists() == (kind != "logger_stats")  # a network
    assert _adapted_kinds(mlflow_store) == [kind]          # registered, tagged with its kind


@pytest.mark.parametrize("kind", KINDS)
def test_a_round_on_wrong_labels_is_rejected_and_the_seed_stands(
        kind: str, seeds: dict[str, Path], tmp_path: Path, mlflow_store: str) -> None:
    _project(tmp_path, invert_train=True, learning_rate=0.05, tolerance=0.02)
    doc = _adapt(tmp_path, seeds[kind])
    assert [doc[f"round_{r}"]["status"] for r in (0, 1)] == ["seed", "rejected"]
    assert doc["final_round"] == 0
    assert doc["stop_reason"].startswith("round 1 rejected: ")
    assert doc["stop_reason"].endswith("round 0's detector stands")
    adapted = load_any_detector(tmp_path / "out" / "adapted_detector.pt")
    seed = load_any_detector(seeds[kind])
    assert kind_of(adapted).name == kind
    if kind != "cnn":                  # the CNN's round 0 re-chooses its point on val
        assert adapted.threshold == seed.threshold
    assert not (tmp_path / "work" / "round-01" / "detector.pt").exists()
    assert _adapted_kinds(mlflow_store) == []              # nothing adapted to register
