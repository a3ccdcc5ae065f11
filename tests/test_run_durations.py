"""An MLflow run lasts as long as the work it records: a stage logs its figures once they
exist, so its run is created with the stage's start time; a fold's child run spans that
method's work, not the moment it was logged (a real `crossval` on real split files, a real
MLflow SQLite store). `evaluate` and `adapt` runs begin before the stage reads its inputs (the
network, the field recordings). train's and tune's runs are checked where those stages already
run (tests/test_train_stage.py, tests/test_tune_study.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from mlflow.tracking import MlflowClient

from leakpipe.adapt import cnn_adapter
from leakpipe.cli import main
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.cv.stage import CvPaths, run_cv
from leakpipe.evaluate import stage as evaluate_stage
from leakpipe.tracking.names import PARENT_RUN_TAG, TAG_STAGE
from tests.conftest import PARAMS
from tests.helpers_detector import (
    copied_store,
    known_detector,
    leak_probs,
    one_torch_thread,
    restore_logging,
    write_plan,
    write_prob_split,
)
from tests.helpers_h5 import write_splits
from tests.test_adapt_stage import _args as adapt_args
from tests.test_adapt_stage import _project as adapt_project

REPO = Path(__file__).resolve().parents[1]
torch_thread = pytest.fixture(one_torch_thread)
_keep_logging = pytest.fixture(autouse=True)(restore_logging)


def _params(tmp: Path) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["runtime"]["device"] = "cpu"
    params["train"].update(batch_size=64)
    params["cv"].update(epochs=1, train_fraction=1.0, folds=3, val_fraction=0.3,
                        methods=["cnn", "level_logreg"], bootstrap_resamples=50)
    params["baselines"]["level_logreg"] = {"C": [1.0]}
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


@pytest.mark.slow
def test_the_crossval_run_and_its_children_last_as_long_as_their_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torch_thread: None) -> None:
    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    splits = write_splits(tmp_path / "data")
    out = tmp_path / "out"
    paths = CvPaths(splits=splits, plan=None, metrics=out / "cv.json",
                    predictions=out / "predictions.csv", plots_dir=out / "plots",
                    work=out / "work")
    start = time.time()
    run_cv(paths, _params(tmp_path), progress=False)
    wall = time.time() - start

    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, f"tags.`{TAG_STAGE}` = 'crossval'")
    parents = [r for r in runs if PARENT_RUN_TAG not in r.data.tags]
    children = [r for r in runs if PARENT_RUN_TAG in r.data.tags]
    assert len(parents) == 1 and len(children) == 3 * 2        # a child per fold and method
    parent = parents[0].info
    duration = (parent.end_time - parent.start_time) / 1000.0
    # the run's span is the stage's work: it starts as run_cv starts and ends after the last
    # child (below), before run_cv returns (logging the runs comes after the work, so no
    # share of the wall time is asserted: on a loaded machine the logging takes longer)
    assert start - 1.0 <= parent.start_time / 1000.0 <= start + 1.0, (parent.start_time, start)
    assert parent.end_time / 1000.0 <= start + wall + 0.5 and 0 < duration <= wall + 0.5
    for child in children:
        info = child.info
        assert child.data.tags[PARENT_RUN_TAG] == parent.run_id
        assert info.status == "FINISHED"
        # inside the parent's span, and ended before the logging began: the work's own span
        assert parent.start_time <= info.start_time < info.end_time <= parent.end_time
    cnn = [c.info for c in children if c.data.tags.get("leakpipe.cv.method") == "cnn"]
    assert len(cnn) == 3
    # the folds ran one after another: their CNN spans do not overlap
    spans = sorted((c.start_time, c.end_time) for c in cnn)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def _timed(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[float]:
    """Record when ``module.name`` is first called (it still runs): the times, filled later."""
    calls: list[float] = []
    real: Callable[..., Any] = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.time())
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, timed)
    return calls


def _only_run(uri: str, stage: str) -> Any:
    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, f"tags.`{TAG_STAGE}` = '{stage}'")
    (run,) = [r for r in runs if PARENT_RUN_TAG not in r.data.tags]
    return run.info


@pytest.mark.slow
def test_the_evaluate_run_begins_before_the_network_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torch_thread: None) -> None:
    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    known_detector(tmp_path / "models" / "model.pt", binary=True)
    rng = np.random.default_rng(0)
    for split, n in (("val", 24), ("test", 16)):
        labels = np.repeat(rng.integers(0, len(KNOWN_CLASSES), n // 2), 2)
        write_prob_split(tmp_path / "data" / "processed" / f"{split}.h5",
                         leak_probs(rng, labels, KNOWN_CLASSES), labels, split=split,
                         recording_ids=[f"{split}-r{i // 2}" for i in range(n)])
    write_plan(tmp_path / "reports" / "preload.json")
    params = yaml.safe_load(PARAMS.read_text())
    params["evaluate"]["bootstrap_resamples"] = 20          # intervals are not the point here
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    loaded = _timed(monkeypatch, evaluate_stage, "load_network")
    assert main(["evaluate", "--params", "params.yaml", "--unvalidated", "--no-progress"]) == 0
    done = time.time()
    run = _only_run(uri, "evaluate")
    assert run.start_time <= round(loaded[0] * 1000) + 1 < run.end_time <= done * 1000 + 1


@pytest.mark.slow
def test_the_adapt_run_begins_before_the_field_recordings_are_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torch_thread: None) -> None:
    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    files = adapt_project(tmp_path, rounds=1)
    decoding = _timed(monkeypatch, cnn_adapter, "load_field")   # the kind reads the field
    assert main(adapt_args(tmp_path, files)) == 0
    done = time.time()
    run = _only_run(uri, "adapt")
    assert run.start_time <= round(decoding[0] * 1000) + 1 < run.end_time <= done * 1000 + 1
