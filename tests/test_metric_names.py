"""Clip figures are named ``clip_*``; what older leakpipe wrote as ``file_*`` still reads."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import yaml

from leakpipe.config import load_section
from leakpipe.detector import load_detector
from leakpipe.detectors.registry import load_any_detector
from leakpipe.metric_names import current_name, current_names
from tests.conftest import PARAMS
from tests.helpers_detector import known_detector


@pytest.mark.parametrize(("old", "new"), [
    ("val/file_f1", "val/clip_f1"),
    ("test/file_roc_auc_ci_low", "test/clip_roc_auc_ci_low"),
    ("test/class/LEAK/file_recall", "test/class/LEAK/clip_recall"),
    ("file_f1", "clip_f1"),
    ("val/file_threshold", "val/clip_threshold"),
])
def test_old_clip_figure_names_are_translated(old: str, new: str) -> None:
    assert current_name(old) == new


@pytest.mark.parametrize("name", ["file_sha256", "test/file_f1_curve", "val/seg_f1",
                                  "test/recording_f1", "test/clip_f1", "profile_f1"])
def test_other_names_stay(name: str) -> None:
    assert current_name(name) == name


def test_no_figure_written_today_says_file() -> None:
    assert not [k for k in current_names({"val/file_f1": 1.0}) if "file" in k]


@pytest.mark.parametrize(("section", "key"), [("train", "monitor"), ("tune", "objective")])
def test_an_older_params_file_naming_file_f1_reads_as_clip_f1(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, section: str, key: str) -> None:
    raw = yaml.safe_load(PARAMS.read_text())
    raw[section][key] = "val/file_f1"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with caplog.at_level(logging.WARNING):
        cfg = load_section(path, section)
    assert getattr(cfg, key) == "val/clip_f1"
    assert f"{section}.{key}" in caplog.text and "old name" in caplog.text


def test_a_detector_file_written_with_file_names_loads_with_clip_names(tmp_path: Path) -> None:
    path = known_detector(tmp_path / "detector.pt")
    raw = torch.load(path, weights_only=False)
    raw["metrics"] = {"test/file_f1": 0.75, "val/file_roc_auc": 0.5, "test/seg_f1": 0.25}
    torch.save(raw, path)
    for loaded in (load_detector(path), load_any_detector(path)):
        assert loaded.metrics == {"test/clip_f1": 0.75, "val/clip_roc_auc": 0.5,
                                  "test/seg_f1": 0.25}
