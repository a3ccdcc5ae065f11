"""What the train stage reads: the preload plan re-checked on this machine, the split
fingerprint a resumed run checks (real split files, no training)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import h5py
import pytest
import torch

from leakpipe.config import load_section
from leakpipe.constants import PLACEMENT_STREAM
from leakpipe.data.reader import open_split
from leakpipe.preload import Budget
from leakpipe.preload.plan import read_plan
from leakpipe.train import inputs
from tests.test_train_stage import make_workspace, write_easy_split


def _budget(host_bytes: int) -> Budget:
    return Budget(host_available=host_bytes, cgroup_limit=None, cgroup_usage=None, gpus=(),
                  cuda=False, gpu_note="no GPU")


@pytest.mark.parametrize(("placement", "host_bytes", "expected"), [
    ("ram", 2**40, "ram"),               # still fits
    ("ram", 2**20, PLACEMENT_STREAM),    # the host is now short of memory
    ("device", 2**40, PLACEMENT_STREAM),  # planned on a GPU machine, trained on a CPU
    ("stream", 2**20, PLACEMENT_STREAM),
])
def test_placement_is_rechecked_at_load_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture, placement: str,
                                             host_bytes: int, expected: str) -> None:
    ws = make_workspace(tmp_path, files_per_class=2)
    plan = json.loads(ws.plan.read_text())
    plan["placement"] = placement
    monkeypatch.setattr("leakpipe.preload.measure_budget", lambda: _budget(host_bytes))
    with caplog.at_level(logging.INFO):
        got = inputs.check_placement(plan, ws.data, 32, torch.device("cpu"))
    assert got == expected
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == (0 if expected == placement else 1)
    if warnings:
        assert "streaming instead" in warnings[0].getMessage()


def test_prepare_training_streams_when_the_plan_no_longer_fits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_workspace(tmp_path, files_per_class=2)
    monkeypatch.setattr("leakpipe.preload.measure_budget", lambda: _budget(2**20))
    cfg = load_section(ws.params, "train")
    data = inputs.prepare_training(ws.data["train"], ws.data["val"],
                                    read_plan(ws.plan), cfg, torch.device("cpu"))
    try:
        assert data.placement == PLACEMENT_STREAM
        assert type(data.train_source).__name__ == "StreamSource"
        assert set(data.data_id) == {"train", "val"}
    finally:
        data.close()


def test_split_fingerprint_is_stable_and_follows_the_labels(tmp_path: Path) -> None:
    a = write_easy_split(tmp_path / "a.h5", "train", 2, seed=0)
    b = write_easy_split(tmp_path / "b.h5", "train", 2, seed=1)      # other values, same labels
    with open_split(a) as first, open_split(a) as again, open_split(b) as other:
        assert inputs.split_fingerprint(first) == inputs.split_fingerprint(again)
        assert inputs.split_fingerprint(first) == inputs.split_fingerprint(other)
    with h5py.File(b, "r+") as h5:
        h5["labels"][0] = 1
    with open_split(a) as first, open_split(b) as changed:
        assert inputs.split_fingerprint(first) != inputs.split_fingerprint(changed)
