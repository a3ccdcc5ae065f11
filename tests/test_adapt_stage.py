"""`leakpipe adapt` end to end on tiny data: a real detector file, real HDF5 splits, real WAV
pools, real ``fit()`` rounds and a real MLflow SQLite store.

The seed detector has known weights (``_seed_detector``): a segment's leak logit is its mean
log-mel level + 15 dB, so loud noise is LEAK and quiet noise is not. Its splits are written
with chosen probabilities, so it is right on val.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.writer import SplitWriter
from leakpipe.detector import load_detector, save_detector
from leakpipe.files import file_sha256
from tests.conftest import PARAMS, REPO
from tests.helpers_detector import (
    copied_store,
    known_detector,
    leak_probs,
    one_torch_thread,
    restore_logging,
)
from tests.helpers_h5 import SMALL_FEATURES

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)
RATE = SMALL_FEATURES.sample_rate
NAME = load_section(PARAMS, "evaluate").registered_model     # adapt registers its detector here
LEAK = KNOWN_CLASSES.index("LEAK")
LABELS = np.repeat(np.arange(len(KNOWN_CLASSES)), 4)       # 20 rows, 4 of them LEAK
CENTRE_DB = -15.0   # mean log-mel level of probability 0.5 (noise of std 0.2: -6.6 dB, 0.01: -33)
SHIFT_DB = 60.0     # first-layer bias: keeps every level above the ReLUs' zero


def _seed_detector(path: Path) -> Path:
    """The known detector (leak logit = level - 12) moved to leak logit = level - CENTRE_DB."""
    detector = load_detector(known_detector(path, features=SMALL_FEATURES))
    model, leak = detector.model, detector.leak_index
    with torch.no_grad():
        model.features[0][0].bias[0] = SHIFT_DB
        model.head.bias[leak] = -SHIFT_DB - CENTRE_DB
        model.leak_head.bias[0] = -SHIFT_DB - CENTRE_DB
    save_detector(path, detector)
    return path


def _split(path: Path, split: str, labels: np.ndarray, leak_truth: np.ndarray,
           rng: np.random.Generator) -> Path:
    """One clip per row, its short segments at levels the seed reads as chosen probabilities:
    LEAK truth around 0.9, the rest around 0.1."""
    probs = leak_probs(rng, leak_truth * LEAK, KNOWN_CLASSES, spread=0.4)   # (F, L, S)
    levels = CENTRE_DB + np.log(probs / (1 - probs))
    shape = SMALL_FEATURES.segment_shape
    mel = np.broadcast_to(levels[..., None, None], (len(labels), *shape)).astype(np.float32)
    with SplitWriter(path, split, SMALL_FEATURES, KNOWN_CLASSES, dtype="float32") as writer:
        for f, label in enumerate(labels):
            writer.append(mel[f:f + 1], int(label), f"{split}-{f}", f"{split}-g{f % 3}")
    return path


def _noise(path: Path, amplitude: float, seconds: float, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sf.write(path, (amplitude * rng.standard_normal(int(seconds * RATE))).astype(np.float32),
             RATE, subtype="FLOAT")


def _project(root: Path, *, invert_train: bool = False, batch_size: int = 128,
             **adapt: object) -> dict[str, Path]:
    """Splits, seed detector, plan, pool, check set and params under ``root``."""
    rng = np.random.default_rng(0)
    truth = (LABELS == LEAK).astype(np.int64)
    train = _split(root / "train.h5", "train", LABELS, truth ^ invert_train, rng)
    val = _split(root / "val.h5", "val", LABELS, truth, rng)
    for i, amplitude in enumerate((0.2, 0.15, 0.01, 0.02, 0.1, 0.005)):
        _noise(root / "pool" / f"rec{i}.wav", amplitude, 3.0, i)
    for i, (cls, amplitude) in enumerate((("LEAK", 0.2), ("LEAK", 0.1), ("NORMAL", 0.01),
                                          ("NORMAL", 0.02), ("BACKGROUND", 0.01))):
        _noise(root / "check" / cls / f"c{i}.wav", amplitude, 2.0, 100 + i)
    params = yaml.safe_load(PARAMS.read_text())
    params["runtime"]["device"] = "cpu"
    params["train"].update(binary=True, input_norm="none", batch_size=batch_size)
    params["train"]["augment"]["enabled"] = False
    params["adapt"].update(source=str(root / "pool"), check=str(root / "check"),
                           pool_truth="", rounds=2, epochs=1, margin=0.0,
                           learning_rate=1e-4, tolerance=0.02)
    params["adapt"].update(adapt)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    plan = {"placement": "ram", "dtype": "float32", "stream": {"buffer_chunks": 1},
            "params": dataclasses.asdict(load_section(PARAMS, "preload"))}
    (root / "preload.json").write_text(json.dumps(plan))
    return {"params": root / "params.yaml", "train": train, "val": val,
            "detector": _seed_detector(root / "detector.pt"), "plan": root / "preload.json"}


def _args(root: Path, files: dict[str, Path]) -> list[str]:
    return ["adapt", "--params", str(files["params"]), "--detector", str(files["detector"]),
            "--train", str(files["train"]), "--val", str(files["val"]),
            "--plan", str(files["plan"]), "--work", str(root / "work"),
            "--network", str(root / "out" / "adapted.pt"),
            "--adapted", str(root / "out" / "adapted_detector.pt"),
            "--metrics", str(root / "out" / "adapt.json"),
            "--plots", str(root / "out" / "rounds.csv"),
            "--figure", str(root / "out" / "rounds.png"), "--no-progress", "--unvalidated"]


def _state(root: Path) -> dict:
    return json.loads((root / "work" / "state.json").read_text())


def test_splits_without_a_validation_stamp_are_refused(
        tmp_path: Path, mlflow_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """As train and evaluate: adapt reads only the split bytes `validate` passed."""
    files = _project(tmp_path)
    args = [a for a in _args(tmp_path, files) if a != "--unvalidated"]
    assert main([*args, "--validated", str(tmp_path / "validated.json")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "validated.json" in err[0], err
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


def test_without_an_accepted_round_nothing_is_registered_as_adapted(
        tmp_path: Path, mlflow_store: str) -> None:
    """Zero rounds: the adapted detector is the seed itself, so the registry gains no version
    and no alias `adapted` (it would say the detector was adapted)."""
    files = _project(tmp_path, rounds=0)
    assert main(_args(tmp_path, files)) == 0
    doc = json.loads((tmp_path / "out" / "adapt.json").read_text())
    assert doc["final_round"] == 0
    assert doc["rounds_accepted"] == 0
    assert _adapted_versions(mlflow_store) == []
    client = MlflowClient(mlflow_store)
    with pytest.raises(MlflowException):
        client.get_model_version_by_alias(NAME, tracking.ALIAS_ADAPTED)


def test_a_round_that_worsens_val_is_rejected_and_the_previous_model_stands(
        tmp_path: Path, mlflow_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Train labels that contradict val (a wrong labelled set), small batches and one epoch
    per round: a round collapses, its val F1 falls, it is rejected, adaptation stops, and the
    outputs are the previous round's detector, byte for byte as that round left it. (Over
    several epochs fit() keeps the best epoch on val, which already guards most rounds.)"""
    files = _project(tmp_path, invert_train=True, batch_size=16, learning_rate=0.01, epochs=1,
                     pseudo_per_labelled=0.05)
    assert main(_args(tmp_path, files)) == 0
    doc = json.loads((tmp_path / "out" / "adapt.json").read_text())
    rounds = [doc[k] for k in sorted(k for k in doc if k.startswith("round_"))]
    statuses = [r["status"] for r in rounds]
    assert statuses[-1] == "rejected" and "rejected" not in statuses[:-1]
    r = len(rounds) - 1
    names = {run.info.run_name for run in _runs(mlflow_store)}   # the round runs say their fate
    assert {f"adapt round {r} (rejected)", "adapt round 0 (seed)"} <= names
    # an alias `adapted` only on a detector a round changed: none when round 1 is rejected
    registered = ["1"] if r > 1 else []
    assert _adapted_versions(mlflow_store) == registered
    assert rounds[r]["val"]["f1"] < rounds[0]["val"]["f1"] - 0.02     # below the seed's
    assert doc["final_round"] == r - 1
    assert doc["stop_reason"].startswith(f"round {r} rejected: val clip F1")
    assert doc["stop_reason"].endswith(f"the seed's {rounds[0]['val']['f1']:.4f}; "
                                       f"round {r - 1}'s detector stands")
    kept = tmp_path / "work" / f"round-{r - 1:02d}" / "detector.pt"
    rejected = tmp_path / "work" / f"round-{r:02d}"
    assert file_sha256(tmp_path / "out" / "adapted_detector.pt") == file_sha256(kept)
    assert load_detector(kept).calibration.method == "platt"   # refitted on val, as evaluate
    assert not (rejected / "network.pt").exists() and not (rejected / "detector.pt").exists()
    assert kept.stat().st_mtime_ns < min(p.stat().st_mtime_ns
                                         for p in (rejected / "checkpoints").iterdir())
    # a rerun keeps the decision: nothing is trained or written again
    before = kept.stat().st_mtime_ns
    assert main(_args(tmp_path, files)) == 0
    assert kept.stat().st_mtime_ns == before
    assert _adapted_versions(mlflow_store) == registered       # and nothing registered again
    assert _state(tmp_path)["stop_reason"] == doc["stop_reason"]
    # other inputs (a new margin): the rounds of the old ones are dropped, not mixed in
    params = yaml.safe_load(files["params"].read_text())
    params["adapt"]["margin"] = 0.01
    files["params"].write_text(yaml.safe_dump(params))
    capsys.readouterr()
    assert main(_args(tmp_path, files)) == 0
    err = capsys.readouterr().err
    assert "belongs to other inputs; starting afresh" in err and "resuming" not in err
    assert _state(tmp_path)["rounds"][0]["round"] == 0


@pytest.mark.slow
def test_a_run_killed_between_rounds_resumes_after_the_last_finished_round(
        tmp_path: Path) -> None:
    files = _project(tmp_path)
    env = {**os.environ, "MLFLOW_TRACKING_URI": copied_store(tmp_path / "mlruns"),
           "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "leakpipe.cli", *_args(tmp_path, files)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    state = tmp_path / "work" / "state.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if state.is_file() and len(json.loads(state.read_text() or "{}").get("rounds", [])) == 2:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before round 1 was recorded"
    done = _state(tmp_path)
    assert [r["round"] for r in done["rounds"]] == [0, 1]
    assert not (tmp_path / "out" / "adapt.json").exists()
    network = tmp_path / "work" / "round-01" / "network.pt"
    stamp = network.stat().st_mtime_ns
    rerun = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                           check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming; rounds 0..1 done in an earlier run" in rerun.stderr
    assert "adapt round 1: fine-tune" not in rerun.stderr
    assert network.stat().st_mtime_ns == stamp
    after = _state(tmp_path)
    assert after["rounds"][:2] == done["rounds"] and after["rounds"][2]["round"] == 2
    assert after["run_id"] == done["run_id"]            # the same MLflow parent run, reopened
    _check_outputs(tmp_path, env["MLFLOW_TRACKING_URI"])


def _runs(store: str) -> list:
    client = MlflowClient(store)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def _adapted_versions(store: str) -> list[str]:
    """The registered versions tagged as adapted detectors."""
    client = MlflowClient(store)
    return sorted(str(v.version) for v in client.search_model_versions(f"name = '{NAME}'")
                  if v.tags.get(tracking.TAG_ADAPTED) == "true")


def _check_outputs(root: Path, store: str) -> None:
    """Every output of a finished 2-round run on the project of ``_project``.

    Exact rates after training rounds hold on any CPU here: the rounds fine-tune the known seed
    at lr 1e-4, and the files sit far from the threshold (measured: leak probability <= 1e-4
    for quiet check / pool files, >= 0.97 for loud ones, thresholds 0.42-0.53)."""
    out = root / "out"
    doc = json.loads((out / "adapt.json").read_text())
    assert doc["final_round"] == 2 and doc["rounds_accepted"] == 2
    assert doc["stop_reason"] == "completed 2 round(s)"
    seed = doc["round_0"]
    assert seed["status"] == "seed" and seed["val"]["f1"] == 1.0
    # loud = LEAK to the seed: the check set is right, the pool splits 3 / 3
    assert seed["check"]["fpr"] == 0.0 and seed["check"]["recall"] == 1.0
    assert seed["pseudo"] == {"leak": 3, "not_leak": 3, "within_margin": 0,
                              "segments": 6 * 11}   # 3 clips x 7 = 21 long: 11 kept each
    assert doc["round_1"]["split"]["labelled_rows"] == 20
    assert doc["round_1"]["changed"] == 0
    adapted = load_detector(out / "adapted_detector.pt")
    assert adapted.threshold == doc["round_2"]["threshold"]
    assert (out / "rounds.png").stat().st_size > 0
    assert len((out / "rounds.csv").read_text().splitlines()) == 4      # header + 3 rounds
    client = MlflowClient(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    finished = [r for r in children if r.info.status == "FINISHED"]
    unfinished = [r for r in children if r not in finished]
    # the SIGKILL lands after round 1 is recorded: at the end of round 1's child run (before
    # MLflow ended it) or inside round 2; that attempt's child run stays unfinished (nothing
    # can end it), and the resumed run does round 2 again, never round 1
    assert {"0", "2"} <= {r.data.tags["leakpipe.adapt_round"] for r in finished}
    assert sorted(r.data.tags["leakpipe.adapt_round"] for r in children) in (
        ["0", "1", "2"], ["0", "1", "2", "2"])
    status = {"0": "seed", "1": "accepted", "2": "accepted"}    # each round's run says its fate
    assert all(r.info.run_name == f"adapt round {n} ({status[n]})"
               for r in finished for n in [r.data.tags["leakpipe.adapt_round"]])
    assert {r.info.run_name for r in unfinished} <= {"adapt round 1 (accepted)", "adapt round 2"}
    assert parent[0].data.metrics["final/check/fpr"] == 0.0
    # the adapted detector: its own registered version, alias `adapted`, described
    adapted = client.get_model_version_by_alias(NAME, tracking.ALIAS_ADAPTED)
    assert adapted.tags[tracking.TAG_ADAPTED] == "true"
    assert adapted.tags[tracking.TAG_ADAPT_RUN] == parent[0].info.run_id
    assert adapted.tags[tracking.TAG_DETECTOR_KIND] == "cnn"      # as its description says
    assert adapted.tags[tracking.TAG_SEED_SHA256] == file_sha256(root / "detector.pt")
    assert parent[0].data.tags[tracking.TAG_REGISTERED_VERSION] == f"{NAME}/{adapted.version}"
    text = adapted.description
    assert text.startswith("Field-adapted leak detector of `leakpipe adapt`")
    assert "2 accepted round(s)" in text and "this is round 2" in text
    assert f"threshold {adapted_threshold(out):g}" in text
    assert "Not scored on the test split" in text
    assert "false-positive rate 0.000 (seed 0.000)" in text
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", store)
        served = tracking.download_model(f"models:/{NAME}@{tracking.ALIAS_ADAPTED}")
    assert file_sha256(served) == file_sha256(out / "adapted_detector.pt")
    assert client.get_registered_model(NAME).description == tracking.MODEL_DESCRIPTION


def adapted_threshold(out: Path) -> float:
    return load_detector(out / "adapted_detector.pt").threshold
