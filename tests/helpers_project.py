"""A repo-like folder that `leakpipe evaluate` / `ship` / `promote` can run in: a known network,
validated val / test splits of scores (two clips per recording), a preload plan and an MLflow
store of its own. Shared by the promotion and registry tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from leakpipe.cli import main
from leakpipe.constants import KNOWN_CLASSES
from tests.conftest import PARAMS
from tests.helpers_detector import (
    copied_store,
    known_detector,
    leak_probs,
    write_plan,
    write_prob_split,
)


def evaluable_project(root: Path, monkeypatch: pytest.MonkeyPatch,
                      split_files: Mapping[str, int]) -> Path:
    """``root`` made the working directory, DVC root and tracking store of such a project;
    ``split_files`` clips per split (val and test)."""
    monkeypatch.setenv("DVC_ROOT", str(root))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(root / "mlruns"))
    monkeypatch.chdir(root)
    known_detector(root / "models" / "model.pt", binary=True)
    rng = np.random.default_rng(0)
    for split, n in split_files.items():        # two clips per recording
        labels = np.repeat(rng.integers(0, len(KNOWN_CLASSES), n // 2), 2)
        write_prob_split(root / "data" / "processed" / f"{split}.h5",
                         leak_probs(rng, labels, KNOWN_CLASSES, spread=0.15), labels,
                         split=split, recording_ids=[f"{split}-r{i // 2}" for i in range(n)])
    write_plan(root / "reports" / "preload.json")
    assert main(["validate", "--params", str(PARAMS), "--splits", *split_files,
                 "--no-progress"]) == 0
    return root


def ship_cnn(root: Path) -> None:
    """`leakpipe ship` of evaluate's CNN detector in the project ``root`` (the working
    directory; its default paths), as if grouped CV had selected the cnn kind: it registers the
    detector as the candidate."""
    auc = {"mean": 0.9, "ci_low": 0.8, "ci_high": 0.97, "folds": [0.9]}
    cv = root / "metrics" / "cv.json"
    cv.parent.mkdir(parents=True, exist_ok=True)
    cv.write_text(json.dumps({"selected": "cnn", "selection_margin": 0.01, "sites": 3,
                              "recordings": 20, "methods": {"cnn": {"recording_roc_auc": auc}}}))
    assert main(["ship", "--params", str(PARAMS),
                 "--data-dir", str(root / "data" / "processed")]) == 0
