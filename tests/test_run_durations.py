"""An MLflow run lasts as long as the work it records: a stage logs its figures once they
exist, so its run is created with the stage's start time; a fold's child run spans that
method's work, not the moment it was logged (a real `crossval` on real split files, a real
MLflow SQLite store)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from leakpipe.cv.stage import CvPaths, run_cv
from leakpipe.tracking.names import PARENT_RUN_TAG, TAG_STAGE
from tests.helpers_detector import copied_store, one_torch_thread
from tests.helpers_h5 import write_splits

REPO = Path(__file__).resolve().parents[1]
torch_thread = pytest.fixture(one_torch_thread)


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
    assert 0.9 * wall <= duration <= wall + 0.5, (duration, wall)   # within 10 % of the stage
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
