"""The model registry explains itself: the registered model and every version ship registers
carry descriptions (what the detector is, its training data, its test figures with intervals).

A real SQLite MLflow store, a detector with known outputs on small validated val / test splits
(``tests.helpers_detector``), the real `leakpipe evaluate` and `leakpipe ship` (cnn kind; the
logger_stats kind's card: tests/test_ship.py). adapt's own version (alias
``adapted``) is checked by tests/test_adapt_stage.py on a finished adaptation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.evaluate.registration import figure_text, training_text
from leakpipe.files import file_sha256
from tests.conftest import PARAMS
from tests.helpers_detector import (
    one_torch_thread,
    restore_logging,
)
from tests.helpers_project import evaluable_project, ship_cnn

NAME = load_section(PARAMS, "evaluate").registered_model
FILES = 40                     # per split, two clips per recording

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Network, validated val / test splits and preload plan in a folder with its own store."""
    return evaluable_project(tmp_path, monkeypatch, {"val": FILES, "test": FILES})


def _evaluate_and_ship(project: Path) -> None:
    assert main(["evaluate", "--params", str(PARAMS), "--no-progress"]) == 0
    ship_cnn(project)


def test_ship_registers_a_described_version_of_a_described_model(project: Path) -> None:
    client = MlflowClient()
    client.create_registered_model(NAME)            # a store from before: no description yet
    sha = file_sha256(project / "models" / "model.pt")
    data = f"train:{'a' * 64},val:{'b' * 64}"
    with tracking.start_run("train", tags={tracking.TAG_MODEL_SHA256: sha,
                                           tracking.TAG_DATA: data}) as train_run:
        pass

    _evaluate_and_ship(project)

    assert client.get_registered_model(NAME).description == tracking.MODEL_DESCRIPTION
    version = client.get_model_version_by_alias(NAME, tracking.ALIAS_CANDIDATE)
    text = version.description
    test = json.loads((project / "metrics" / "eval.json").read_text())["test"]
    f1 = f"| F1 | {test['clip_f1']:.3f} [{test['clip_f1_ci_low']:.3f}, " \
         f"{test['clip_f1_ci_high']:.3f}] |"
    card = (project / "reports" / "shipped_model_card.md").read_text()
    evaluate_card = (project / "reports" / "model_card.md").read_text()
    assert card.startswith(evaluate_card.rstrip())      # evaluate's card of the network, then
    assert "## Figures per recording" in card and "## Why this kind" in card   # ship's
    assert text.startswith(card)                                        # the model card, then
    assert text[len(card):] == (                                        # the run, registry only
        "\n## Provenance (registry only)\n\n- MLflow train run of this network: "
        f"`{train_run.run_id}` (kept out of reports/model_card.md, whose bytes depend on the "
        "data and code alone).\n")
    assert text.startswith(f"# Model card: leak detector {sha[:12]}")
    assert "- LeakCNN on log-mel segments" in text
    assert f1 in text and "ROC-AUC" in text and "95% intervals resampling recordings" in text
    assert f"| sensitivity | {test['clip_recall']:.3f} [" in text
    assert f"trained on the train split sha256 {'a' * 12}, val split sha256 {'b' * 12}" in text
    assert train_run.run_id not in card and f"sha256 {sha[:12]}" in text
    test_sha = file_sha256(project / "data" / "processed" / "test.h5")
    assert f"Test split: file sha256 {test_sha[:12]}, {FILES} clips of {FILES // 2} recordings" \
        in text


def test_the_card_file_is_byte_stable_across_fresh_runs(project: Path) -> None:
    """Two evaluations of the same network and data, each shipped and linked to another train
    run (a fresh `dvc repro` trains anew): reports/model_card.md and
    reports/shipped_model_card.md, DVC outputs, keep their bytes; each registered version's
    description names its own train run."""
    client = MlflowClient()
    sha = file_sha256(project / "models" / "model.pt")
    tags = {tracking.TAG_MODEL_SHA256: sha, tracking.TAG_DATA: f"train:{'a' * 64}"}
    cards, runs = [], []
    for _ in range(2):
        with tracking.start_run("train", tags=tags) as train_run:
            pass
        runs.append(train_run.run_id)
        _evaluate_and_ship(project)
        cards.append((project / "reports" / "model_card.md").read_bytes()
                     + (project / "reports" / "shipped_model_card.md").read_bytes())
        version = client.get_model_version_by_alias(NAME, tracking.ALIAS_CANDIDATE)
        assert f"`{train_run.run_id}`" in version.description
        client.delete_run(train_run.run_id)          # the next evaluation finds the next one
    assert runs[0] != runs[1] and cards[0] == cards[1]
    assert all(run.encode() not in cards[0] for run in runs)


def test_a_description_someone_wrote_is_kept(project: Path) -> None:
    client = MlflowClient()
    client.create_registered_model(NAME, description="ours: the pilot at site 4")
    _evaluate_and_ship(project)
    assert client.get_registered_model(NAME).description == "ours: the pilot at site 4"
    version = client.get_model_version_by_alias(NAME, tracking.ALIAS_CANDIDATE)
    assert "training data not known here (no train run of this network" in version.description


def test_figures_and_training_data_in_words() -> None:
    metrics = {"f1": 0.7062, "f1_ci_low": 0.669, "f1_ci_high": 0.7396, "auc": float("nan"),
               "acc": 0.5}
    assert figure_text(metrics, "f1") == "0.706 [0.669, 0.740]"
    assert figure_text(metrics, "acc") == "0.500"           # no bootstrap: the figure alone
    assert figure_text(metrics, "auc") == figure_text(metrics, "missing") == "n/a"
    assert training_text(None).startswith("training data not known here")
    assert training_text(f"val:{'2' * 64},train:{'1' * 64}") == (
        f"trained on the train split sha256 {'1' * 12}, val split sha256 {'2' * 12}")
