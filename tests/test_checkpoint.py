"""Checkpoints: versioned dict, unwrapped model, atomic writes, keep-last-k + best, auto-resume."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from leakpipe.files import save_torch_atomic
from leakpipe.model import LeakCNN
from leakpipe.train import checkpoint as ck


def _model() -> nn.Module:
    torch.manual_seed(0)
    return LeakCNN(2, widths=(2, 4, 4), dropout=0.0, pool_h=2, hidden=8)


def _ckpt(epoch: int, model: nn.Module | None = None) -> dict:
    model = model or _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 1, 8, 1))[0].sum().backward()
    opt.step()
    return ck.make_checkpoint(model=model, epoch=epoch, step=10 * epoch,
                              optimizer=opt.state_dict(), config={"train": {"seed": 1}},
                              class_names=["NOLEAK", "LEAK"], history=[{"val/loss": 0.5}])


class _Compiled(nn.Module):
    """Stands in for torch.compile's OptimizedModule (keys gain '_orig_mod.')."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self._orig_mod = inner


class _Parallel(nn.Module):
    """Stands in for DistributedDataParallel (keys gain 'module.')."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.module = inner


def test_round_trip_with_weights_only(tmp_path: Path) -> None:
    ckpt = _ckpt(3)
    save_torch_atomic(ckpt, tmp_path / "c.pt")
    loaded = ck.load_checkpoint(tmp_path / "c.pt")
    assert loaded["version"] == ck.CHECKPOINT_VERSION
    assert (loaded["epoch"], loaded["step"], loaded["class_names"]) == (3, 30, ["NOLEAK", "LEAK"])
    for key, value in ckpt["model"].items():
        assert torch.equal(loaded["model"][key], value)
    assert loaded["optimizer"]["state"][0]["exp_avg"].shape == ckpt["model"][
        next(iter(ckpt["model"]))].shape


def test_saved_model_is_unwrapped(tmp_path: Path) -> None:
    inner = _model()
    wrapped = _Parallel(_Compiled(inner))
    assert all(k.startswith("module._orig_mod.") for k in wrapped.state_dict())
    state = ck.model_state(wrapped)
    assert set(state) == set(inner.state_dict())
    assert ck.unwrap(wrapped) is inner
    fresh = _model()
    ck.load_model_state(_Compiled(fresh), {"model": wrapped.state_dict()}, tmp_path / "x.pt")


def test_rng_state_round_trips_through_weights_only(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    save_torch_atomic(ck.rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    ck.set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def _partial_save(obj, handle, *args, **kwargs) -> None:
    handle.write(b"PK\x03\x04 half a checkpoint")
    raise OSError("disk full")


def test_interrupted_save_keeps_the_previous_checkpoint(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    first = _ckpt(1)
    ck.save_checkpoint(first, tmp_path, keep_last=3, is_best=True)
    monkeypatch.setattr(torch, "save", _partial_save)
    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(_ckpt(1), tmp_path, keep_last=3, is_best=True)   # same file again
    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(_ckpt(2), tmp_path, keep_last=3, is_best=False)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "epoch-0001.pt"]
    assert ck.latest_checkpoint(tmp_path) == tmp_path / "epoch-0001.pt"
    for name in ("epoch-0001.pt", "best.pt"):
        loaded = ck.load_checkpoint(tmp_path / name)
        assert loaded["epoch"] == 1
        for key, value in first["model"].items():
            assert torch.equal(loaded["model"][key], value)


def test_keep_last_k_and_best(tmp_path: Path) -> None:
    for epoch in range(5):
        ck.save_checkpoint(_ckpt(epoch), tmp_path, keep_last=2, is_best=epoch == 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["best.pt", "epoch-0003.pt", "epoch-0004.pt"]
    assert ck.load_checkpoint(tmp_path / "best.pt")["epoch"] == 1


def test_latest_ignores_temporaries_and_strangers(tmp_path: Path) -> None:
    assert ck.latest_checkpoint(tmp_path / "missing") is None
    assert ck.latest_checkpoint(tmp_path) is None
    ck.save_checkpoint(_ckpt(2), tmp_path, keep_last=5, is_best=False)
    ck.save_checkpoint(_ckpt(10), tmp_path, keep_last=5, is_best=False)
    (tmp_path / ".epoch-0011.pt.tmp").write_bytes(b"partial")
    (tmp_path / "epoch-12.pt").write_bytes(b"not ours")
    (tmp_path / "notes.txt").write_text("hi")
    assert ck.latest_checkpoint(tmp_path) == tmp_path / "epoch-0010.pt"


# A kill inside a write leaves its hidden temporary file; the user's own files stay.
OWN_TEMPORARIES = (".partial.pt.tmp", ".best.pt.tmp", ".epoch-0003.pt.tmp", ".run_id.tmp")
USER_FILES = (".notes.tmp", "partial.pt.tmp", ".epoch-3.pt.tmp", ".partial.pt.tmp.bak",
              ".finished.tmp", "notes.txt")


def _litter(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in (*OWN_TEMPORARIES, *USER_FILES):
        (directory / name).write_bytes(b"PK\x03\x04 half a checkpoint")


def _names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_a_finished_folder_is_cleared_of_killed_writes_temporaries(tmp_path: Path) -> None:
    """The next fresh start begins without the temporaries of the finished run's killed
    writes (they used to survive it); files the writers never write are left alone."""
    ck.save_checkpoint(_ckpt(3), tmp_path, keep_last=2, is_best=True)
    ck.mark_finished(tmp_path)
    _litter(tmp_path)
    assert ck.clear_if_finished(tmp_path)
    assert _names(tmp_path) == set(USER_FILES)


def test_clear_temporaries_removes_only_the_writers_own(tmp_path: Path) -> None:
    assert ck.clear_temporaries(tmp_path / "missing") == []
    ck.save_checkpoint(_ckpt(3), tmp_path, keep_last=2, is_best=True)
    _litter(tmp_path)
    (tmp_path / ".best.pt.tmp.d").mkdir()                          # a folder is never ours
    removed = ck.clear_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted(OWN_TEMPORARIES)
    assert _names(tmp_path) == {*USER_FILES, ".best.pt.tmp.d", "best.pt", "epoch-0003.pt"}
    assert ck.latest_checkpoint(tmp_path) == tmp_path / "epoch-0003.pt"


def test_unreadable_checkpoints_name_the_file(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00" * 64)
    with pytest.raises(ck.CheckpointError, match="garbage.pt: not a readable checkpoint"):
        ck.load_checkpoint(garbage)
    with pytest.raises(ck.CheckpointError, match="no such checkpoint"):
        ck.load_checkpoint(tmp_path / "missing.pt")


def test_version_and_keys_are_checked(tmp_path: Path) -> None:
    future = {**_ckpt(1), "version": ck.CHECKPOINT_VERSION + 1}
    save_torch_atomic(future, tmp_path / "future.pt")
    with pytest.raises(ck.CheckpointError, match="future.pt: checkpoint version 2"):
        ck.load_checkpoint(tmp_path / "future.pt")
    save_torch_atomic({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ck.CheckpointError, match="not a leakpipe checkpoint"):
        ck.load_checkpoint(tmp_path / "other.pt")


class _Arbitrary:
    """A pickled object that weights_only loading must refuse."""


def test_arbitrary_pickles_are_refused(tmp_path: Path) -> None:
    torch.save({"version": 1, "model": {}, "epoch": 0, "x": _Arbitrary()}, tmp_path / "evil.pt")
    with pytest.raises(ck.CheckpointError, match="evil.pt: not a readable checkpoint"):
        ck.load_checkpoint(tmp_path / "evil.pt")


def test_mismatched_weights_name_the_file(tmp_path: Path) -> None:
    other = LeakCNN(5, widths=(2, 4, 4), pool_h=2, hidden=8)
    with pytest.raises(ck.CheckpointError, match="other.pt: weights do not fit this model"):
        ck.load_model_state(_model(), {"model": other.state_dict()}, tmp_path / "other.pt")
