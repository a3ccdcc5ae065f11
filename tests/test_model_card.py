"""The model card: per-condition figures with their n from the manifest, the sim-to-real
section from its report or a plain "not measured", the same bytes for the same evaluation (no
run id, no absolute path: those go to the registry description or are shortened)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from leakpipe.config import FeatureConfig, ModelConfig, load_section
from leakpipe.constants import BINARY_CLASSES, KNOWN_CLASSES
from leakpipe.detector import Network
from leakpipe.evaluate.model_card import (
    CardInputs,
    manifest_conditions,
    model_card,
    registry_description,
)
from leakpipe.files import write_text_atomic
from leakpipe.model import create_model
from tests.conftest import PARAMS
from tests.helpers_h5 import SMALL_FEATURES


def _network(features: FeatureConfig = SMALL_FEATURES) -> Network:
    cfg: ModelConfig = load_section(PARAMS, "model")
    return Network(model=create_model(cfg, 2), model_cfg=cfg, class_names=BINARY_CLASSES,
                   data_class_names=KNOWN_CLASSES, binary=True, features=features)


def _inputs(**changes: object) -> CardInputs:
    """30 test recordings (2 clips each) at 6 sites: metal ones all called right, plastic ones
    all called LEAK; 24 metal, 6 plastic recordings."""
    ids = np.repeat([f"LEAK/r{i}.wav" if i % 2 else f"NORMAL/r{i}.wav" for i in range(30)], 2)
    truth = np.array([i.startswith("LEAK") for i in ids])
    plastic = np.array([int(i.split("r")[-1].split(".")[0]) >= 24 for i in ids])
    decision = truth | plastic
    conditions = {i: {"material": "plastic" if int(i.split("r")[-1].split(".")[0]) >= 24
                      else "metal", "sample_rate": "4096"} for i in set(ids)}
    base = CardInputs(
        network=_network(), metrics={"test/clip_f1": 0.8, "test/clip_f1_ci_low": 0.7,
                                     "test/clip_f1_ci_high": 0.9, "test/ece": 0.05,
                                     "test/ece_uncalibrated": 0.12},
        rule="long_vote", threshold=0.3, prob_threshold=0.41, criterion="f1", confidence=0.95,
        model_sha="ab" * 32, test_sha="cd" * 32, training="trained on the train split",
        source="data/raw", truth=truth, decision=decision, recording_ids=ids,
        groups=np.array([f"site{k % 6}" for k in range(len(ids))]), conditions=conditions,
        sim_to_real=None)
    return dataclasses.replace(base, **changes)


def _section(card: str, title: str) -> str:
    return card.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_per_condition_rows_carry_their_n_and_their_own_rates() -> None:
    card = model_card(_inputs())
    rows = {line.split("|")[1].strip(): line for line in
            _section(card, "Per condition").splitlines() if line.startswith("| ")}
    assert "| 24 (12 / 12) | 1.000 [" in rows["metal"]        # all right, n 12 / 12
    assert rows["plastic *"].split("|")[4].strip().startswith("0.000 [")   # every other: LEAK
    assert "| 6 (3 / 3) |" in rows["plastic *"]               # * : fewer than 20 recordings
    assert "| 30 (15 / 15) |" in rows["4096"]
    assert "sensor" not in _section(card, "Per condition")    # a column the manifest lacks


def test_without_conditions_or_sim_to_real_the_card_says_so() -> None:
    card = model_card(_inputs(conditions={}))
    assert "no per-condition figures" in _section(card, "Per condition")
    assert "Not measured for this card" in _section(card, "Real recordings")
    assert card == model_card(_inputs(conditions={}))        # no clock, no host: same bytes
    assert "| F1 | 0.800 [0.700, 0.900] |" in card
    assert "0.050 (uncalibrated 0.120)" in card
    assert "60 clips of 30 recordings at 6 sites" in card


SIM_TO_REAL = {"detector": {"path": "models/detector.pt", "input_norm": "none",
                            "threshold": 0.31},
               "recordings": {"a.wav": "LEAK", "b.wav": "NOLEAK"},
               "zero_shot": {"overall": {"n_clips": 60, "roc_auc": 0.3785,
                                         "roc_auc_ci": [0.1985, 0.5603],
                                         "balanced_accuracy": 0.46, "recall": 0.92,
                                         "specificity": 0.0, "ci_note": "one testbed."}}}


def test_sim_to_real_figures_are_quoted_only_for_this_detector_file() -> None:
    """The benchmark scores whichever detector file it is given: its figures are this card's
    only when the report names this detector file's sha256; otherwise none of them is quoted
    (the report of another, or of an unnamed, detector)."""
    mine = {**SIM_TO_REAL, "detector": {**SIM_TO_REAL["detector"], "sha256": "ef" * 32}}
    text = _section(model_card(_inputs(sim_to_real=mine, sim_to_real_path="s.json",
                                       detector_sha="ef" * 32)), "Real recordings")
    assert "From `s.json`, which scored this detector file (sha256 efefefefefef" in text
    assert "ROC-AUC 0.379 [0.199, 0.560]" in text and "specificity 0.000" in text
    assert "over 60 clips of 2 real recordings. One testbed." in text
    for report, sha in ((SIM_TO_REAL, "ef" * 32), (mine, "12" * 32), (mine, "")):
        other = _section(model_card(_inputs(sim_to_real=report, sim_to_real_path="s.json",
                                            detector_sha=sha)), "Real recordings")
        assert other.startswith(" (sim-to-real)\n\nNot measured for this detector: `s.json` "
                                "scored the detector file then at `models/detector.pt` (")
        assert "0.379" not in other and "ROC-AUC" not in other and "0.31" not in other


def test_the_operating_point_is_on_the_leak_prob_scale() -> None:
    text = _section(model_card(_inputs()), "Model")
    assert ("threshold 0.4100 on `leak_prob` (raw rule score 0.3000), chosen on the val split "
            "by f1: a recording is LEAK when its `leak_prob` reaches it") in text


def test_the_card_file_has_the_same_bytes_whatever_the_run(tmp_path: Path) -> None:
    """Two fresh runs on the same data and code: other MLflow run ids, another checkout (the
    benchmark's detector path is absolute); the card files are byte-identical, the run id is
    in the registry description only."""
    report = {"detector": {"path": "/home/a/leakpipe/models/detector.pt", "input_norm": "none",
                           "threshold": 0.31},
              "recordings": {"a.wav": "LEAK"}, "zero_shot": {"overall": {"n_clips": 12}}}
    runs = {"first": ("0f" * 16, "/srv/one/benchmarks/results/s.json"),
            "second": ("a1" * 16, "/tmp/two/benchmarks/results/s.json")}
    written = {}
    for name, (run_id, path) in runs.items():
        card = _inputs(train_run=run_id, sim_to_real=report, sim_to_real_path=path)
        write_text_atomic(tmp_path / f"{name}.md", model_card(card))
        written[name] = (tmp_path / f"{name}.md").read_bytes()
        description = registry_description(model_card(card), card.train_run)
        assert description.startswith(model_card(card))
        assert f"MLflow train run of this network: `{run_id}`" in description
    assert written["first"] == written["second"]
    text = written["first"].decode()
    assert "0f0f" not in text and "a1a1" not in text and "/srv" not in text and "/home" not in text
    assert ("Not measured for this detector: `.../results/s.json` scored the detector file "
            "then at `.../models/detector.pt` (no sha256)") in text
    for title in ("Intended use", "Model", "Data", "Test figures", "Per condition",
                  "Real recordings", "Known limits"):
        assert f"\n## {title}" in text
    assert "- Source: `data/raw` (params.yaml `build.source`); trained on the train split." in text
    bare = _inputs()
    assert registry_description(model_card(bare), bare.train_run) == model_card(bare)  # the card


def test_the_limits_name_the_models_band() -> None:
    f = dataclasses.replace(SMALL_FEATURES, sample_rate=8192, fmax=4000.0)
    text = _section(model_card(_inputs(network=_network(f))), "Known limits")
    assert "8192 Hz audio, 16 mel bands up to 4000 Hz" in text and "below 8000 Hz" in text


def test_conditions_come_from_the_manifest_of_the_source(tmp_path: Path) -> None:
    (tmp_path / "manifest.csv").write_text(
        "path,class,group,material,sensor\nLEAK/a.wav,LEAK,s1,metal,\nNORMAL/b.wav,NORMAL,s2,"
        "plastic,hydrophone\n")
    assert manifest_conditions(tmp_path) == {
        "LEAK/a.wav": {"material": "metal"},               # an empty value is left out
        "NORMAL/b.wav": {"material": "plastic", "sensor": "hydrophone"}}
    assert manifest_conditions(tmp_path / "manifest.csv") == manifest_conditions(tmp_path)
    (tmp_path / "LEAK").mkdir()
    assert manifest_conditions(tmp_path / "LEAK") == {}      # class folders: no manifest
    assert manifest_conditions(tmp_path / "absent") == {}
    json.dumps(manifest_conditions(tmp_path))               # plain strings only
