"""Evaluate's domain reference (``leakpipe.evaluate.domain_reference``) through
``evaluate_detector`` on real tiny splits: fitted on train, its threshold set on val, a test split
moved away from train flagged, one drawn like train not, and the reference carried into the
detector file predict reads.

The splits are ``write_splits``' random log-mel (every site and class drawn alike), 40
recordings each; a shifted test split is the in-domain one with its log-mel moved.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.config import load_section
from leakpipe.constants import H5_MEL
from leakpipe.detector import Detector, load_detector, save_detector
from leakpipe.evaluate.detector_evaluation import (
    Evaluation,
    batch_limits,
    detector_of,
    evaluate_detector,
)
from leakpipe.runtime import cpu_runtime
from tests.conftest import PARAMS
from tests.helpers_detector import known_detector, one_torch_thread, write_plan
from tests.helpers_h5 import SMALL_FEATURES, write_splits

_one_thread = pytest.fixture(autouse=True)(one_torch_thread)

EVALUATE = dataclasses.replace(load_section(PARAMS, "evaluate"), bootstrap_resamples=50)
DECISION = load_section(PARAMS, "decision")
RECORDINGS = 40                     # per split: 2 sites x 5 classes x 4
SHIFT_DB = 30.0                     # far beyond the training recordings' spread (a few dB)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """train / val / test of 40 recordings each, a known detector and a preload plan."""
    root = tmp_path_factory.mktemp("domain_reference")
    paths = write_splits(root / "processed", recordings_per_class=4)
    return {**paths, "detector": known_detector(root / "detector.pt"),
            "plan": write_plan(root / "preload.json")}


def _shifted(path: Path, out: Path, change: str) -> Path:
    """A copy of the split ``path`` with every recording moved: ``level`` SHIFT_DB louder in
    every band, ``shape`` tilted from -SHIFT_DB (lowest band) to +SHIFT_DB (highest)."""
    shutil.copyfile(path, out)
    tilt = np.linspace(-1.0, 1.0, SMALL_FEATURES.n_mels)[:, None]        # (M, 1)
    move = SHIFT_DB * (tilt if change == "shape" else np.ones_like(tilt))
    with h5py.File(out, "r+") as f:
        mel = f[H5_MEL][:]                                                # (N, L, S, M, T)
        f[H5_MEL][:] = (mel.astype(np.float32) + move).astype(mel.dtype)
    return out


def _evaluate(data: dict[str, Path], test: Path, input_norm: str = "none",
              with_train: bool = True) -> tuple[Evaluation, Detector]:
    network = dataclasses.replace(load_detector(data["detector"]), input_norm=input_norm)
    paths = {"val": data["val"], "test": test, **({"train": data["train"]} if with_train
                                                   else {})}
    plan = {"placement": "ram", "params": {"safety": 0.8, "host_reserve_mb": 0,
                                           "device_reserve_mb": 0}}
    return evaluate_detector(network, paths, plan, EVALUATE, DECISION, cpu_runtime()), network


def test_a_test_split_drawn_like_train_is_in(data: dict[str, Path]) -> None:
    result, _ = _evaluate(data, data["test"])
    ref, m = result.domain, result.metrics
    assert ref is not None and ref.uses_level                  # input_norm none: level counts
    assert ref.fitted_on.startswith(f"{RECORDINGS} train recordings; threshold on "
                                    f"{RECORDINGS} val recordings")
    assert result.info["eval/domain_reference"] == ref.fitted_on
    assert m["domain/threshold"] == ref.threshold and ref.val_distances.size == RECORDINGS
    # under 100 val recordings the threshold is the val maximum: none of val exceeds it
    assert m["domain/val_shifted_rate"] == 0.0 and m["domain/val_recordings"] == RECORDINGS
    assert m["domain/test_recordings"] == RECORDINGS
    assert m["domain/test_shifted_rate"] <= 0.1               # at most 4 of 40 alone
    assert m["domain/test_set_shifted"] == 0.0 and m["domain/test_set_p_value"] > 0.01
    assert (m["domain/test_shifted_rate_ci_low"] <= m["domain/test_shifted_rate"]
            <= m["domain/test_shifted_rate_ci_high"])


@pytest.mark.parametrize(("input_norm", "change", "flagged"), [
    ("none", "level", True),
    ("none", "shape", True),
    ("clip_band", "level", False),     # the network does not see the level: no shift for it
    ("clip_band", "shape", True),
])
def test_a_test_split_moved_away_from_train_is_flagged(tmp_path: Path, data: dict[str, Path],
                                                       input_norm: str, change: str,
                                                       flagged: bool) -> None:
    test = _shifted(data["test"], tmp_path / "test.h5", change)
    result, _ = _evaluate(data, test, input_norm)
    m = result.metrics
    assert result.domain is not None and result.domain.uses_level is (input_norm == "none")
    assert m["domain/val_shifted_rate"] == 0.0                 # val is what it was
    if flagged:
        assert m["domain/test_shifted_rate"] == 1.0            # every recording alone
        assert m["domain/test_set_shifted"] == 1.0 and m["domain/test_set_p_value"] < 1e-3
    else:
        assert m["domain/test_shifted_rate"] <= 0.1 and m["domain/test_set_shifted"] == 0.0


def test_the_reference_goes_into_the_detector_file(tmp_path: Path,
                                                   data: dict[str, Path]) -> None:
    result, network = _evaluate(data, data["test"])
    limits = batch_limits({"params": {"safety": 0.8, "host_reserve_mb": 0,
                                      "device_reserve_mb": 0}}, EVALUATE)
    save_detector(tmp_path / "detector.pt", detector_of(result, network, limits, 0.5,
                                                        quality=DEAD_ONLY))
    saved = load_detector(tmp_path / "detector.pt").domain
    assert saved is not None and result.domain is not None
    assert saved.threshold == result.domain.threshold
    assert saved.fitted_on == result.domain.fitted_on
    np.testing.assert_array_equal(saved.val_distances, result.domain.val_distances)


def test_without_a_train_split_there_is_no_reference(data: dict[str, Path]) -> None:
    """Cross-validation folds pass no train split: no reference, no domain figures."""
    result, _ = _evaluate(data, data["test"], with_train=False)
    assert result.domain is None and "eval/domain_reference" not in result.info
    assert not [k for k in result.metrics if k.startswith("domain/")]
