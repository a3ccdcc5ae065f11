"""fit() on tiny in-memory data (tests/helpers_fit.py): learning, both label modes, resume,
fail-fast, early stopping, starting from a checkpoint. The loop and validation: test_train_loop.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from leakpipe.config import TrainConfig, load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.schema import task_classes
from leakpipe.decision.voting import VotingConfig, threshold_grid
from leakpipe.tracking import NullTracker
from leakpipe.train import checkpoint as ck
from leakpipe.train.fit import CompileError, fit
from leakpipe.train.losses import NonFiniteLossError
from tests.conftest import PARAMS
from tests.helpers_fit import (
    DECISION,
    N_MELS,
    RUNTIME,
    TINY_MODEL,
    _data,
    _files,
    _fit,
    tiny_train_cfg,
    torch_globals,
    val_split,
)

_torch_globals = pytest.fixture(autouse=True)(torch_globals)


@pytest.fixture(scope="module")
def train_cfg() -> TrainConfig:
    return tiny_train_cfg()


# ---------------------------------------------------------------------------------------------
# fit
# ---------------------------------------------------------------------------------------------


class RecordingTracker(NullTracker):
    def __init__(self) -> None:
        self.logged: list[tuple[int | None, dict]] = []

    def log_metrics(self, metrics, step=None) -> None:
        self.logged.append((step, dict(metrics)))


EPOCH_METRICS = ("train/loss", "train/accuracy", "train/lr", "train/grad_norm_mean",
                 "train/grad_norm_max", "val/loss", "val/seg_precision", "val/seg_recall",
                 "val/seg_f1", "val/clip_f1", "val/clip_threshold", "vitals/samples_per_s",
                 "val/pred_share/LEAK")


# A learning network clears these; exact figures depend on the CPU's float kernels. Measured
# here: val F1 and ROC-AUC 1.0 from epoch 1 in both label modes (the alternative kernels of
# `make test-kernels` too); the same network left untrained (learning rate 1e-12) reads F1
# 0.55 / 0.42 and ROC-AUC 0.70 / 0.41 (5-class / binary). 4 LEAK files of 20: F1 0.75 allows
# about two wrong files.
LEARNED_F1 = 0.75
LEARNED_ROC_AUC = 0.9


@pytest.mark.parametrize("binary", [False, True])
def test_fit_learns_the_leaks_in_both_label_modes(train_cfg: TrainConfig, tmp_path: Path,
                                                  binary: bool) -> None:
    tracker, seen = RecordingTracker(), []
    result = _fit(train_cfg, tmp_path, binary, tracker=tracker,
                  on_epoch=lambda epoch, metrics: seen.append((epoch, metrics)))
    assert [step for step, _ in tracker.logged] == [0, 1, 2] == [e for e, _ in seen]
    for _, metrics in tracker.logged:
        assert set(EPOCH_METRICS) <= set(metrics)
        # MLflow's run page orders chart sections by name: the learning curves come first
        sections = sorted({name.split("/")[0] for name in metrics if "/" in name})
        assert sections[:2] == ["train", "val"], sections
    assert result.best_metrics["val/clip_f1"] >= LEARNED_F1, result.best_metrics
    assert result.best_metrics["val/clip_roc_auc"] >= LEARNED_ROC_AUC, result.best_metrics
    assert len(result.history) == 3 and result.epochs_run == 3
    grid = threshold_grid(DECISION.threshold_min, DECISION.threshold_max,
                          DECISION.threshold_step)
    assert result.threshold in grid.tolist()
    assert result.best_checkpoint == tmp_path / ck.BEST_NAME
    best = ck.load_checkpoint(result.best_checkpoint)
    assert best["epoch"] == result.best_epoch and best["threshold"] == result.threshold
    assert best["class_names"] == list(task_classes(KNOWN_CLASSES, binary))
    assert not result.model.training


def test_resume_ends_exactly_like_an_uninterrupted_run(train_cfg: TrainConfig,
                                                       tmp_path: Path) -> None:
    class Interrupt(Exception):
        pass

    def interrupt_after_second_epoch(epoch: int, metrics: dict) -> None:
        if epoch == 1:
            raise Interrupt

    whole = _fit(train_cfg, tmp_path / "whole")
    with pytest.raises(Interrupt):
        _fit(train_cfg, tmp_path / "split", on_epoch=interrupt_after_second_epoch)
    resumed = _fit(train_cfg, tmp_path / "split")
    assert resumed.resumed_from == tmp_path / "split" / "epoch-0001.pt"
    assert resumed.epochs_run == 1
    a, b = (ck.load_checkpoint(tmp_path / d / "epoch-0002.pt") for d in ("whole", "split"))
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for index, state in a["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][index][name]), (index, name)
    assert a["scheduler"] == b["scheduler"] and a["early_stopping"] == b["early_stopping"]
    assert _no_perf(whole.history) == _no_perf(resumed.history)
    assert whole.best_epoch == resumed.best_epoch


def _no_perf(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.startswith("vitals/")} for h in history]


def test_nan_loss_fails_fast_with_the_components(train_cfg: TrainConfig,
                                                 tmp_path: Path) -> None:
    with pytest.raises(NonFiniteLossError,
                       match=r"in training epoch 1, first at step 1: total=nan class=nan aux=nan"):
        _fit(train_cfg, tmp_path, nan_epoch=1)
    assert [p.name for _, p in ck.epoch_checkpoints(tmp_path)] == ["epoch-0000.pt"]


def test_compile_failure_raises(train_cfg: TrainConfig, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("inductor unavailable")

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.raises(CompileError, match=r"train.compile: .*mode='default'.*inductor"):
        _fit(dataclasses.replace(train_cfg, compile=True), tmp_path)
    assert not any(tmp_path.iterdir())                      # no checkpoint, no trial result


def test_lazy_compile_failure_is_not_swallowed(train_cfg: TrainConfig, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    class FailsOnFirstCall(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self._orig_mod = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("backend compiler failed")

    monkeypatch.setattr(torch, "compile", lambda model, mode: FailsOnFirstCall(model))
    with pytest.raises(RuntimeError, match="backend compiler failed"):
        _fit(dataclasses.replace(train_cfg, compile=True), tmp_path)


def test_early_stopping_ends_a_flat_run(train_cfg: TrainConfig, tmp_path: Path) -> None:
    # lr 1e-12: parameters move by about 1e-12 (and the model has no batch norm), far too
    # little to change a val decision, so val F1 is flat whatever the float kernels
    flat = dataclasses.replace(train_cfg, epochs=10, learning_rate=1e-12, eta_min=0.0,
                               early_stop_patience=2)
    result = _fit(flat, tmp_path)
    assert len(result.history) == 3
    assert "did not improve for 2 epochs" in result.stop_reason
    again = _fit(flat, tmp_path)                            # resuming a stopped run: no-op
    assert again.epochs_run == 0 and again.history == result.history


def test_monitor_falls_back_to_val_loss_without_leaks(train_cfg: TrainConfig,
                                                      tmp_path: Path) -> None:
    source, val, counts = _data(False, train_cfg)
    mel, raw = _files(4, 1)
    no_leak = raw != KNOWN_CLASSES.index("LEAK")
    val = val_split(mel[no_leak], raw[no_leak], KNOWN_CLASSES)
    result = fit(TINY_MODEL, dataclasses.replace(train_cfg, epochs=1), runtime=RUNTIME,
                 decision=DECISION, train_source=source, val=val, class_counts=counts,
                 tracker=NullTracker(),
                 checkpoint_dir=tmp_path)
    assert result.monitor == "val/loss"
    assert result.history[0]["val/clip_f1"] == 0.0


def test_early_stopping_on_val_roc_auc_keeps_the_epoch_with_the_best_ranking(
        train_cfg: TrainConfig, tmp_path: Path) -> None:
    cfg = dataclasses.replace(train_cfg, monitor="val/clip_roc_auc")
    result = _fit(cfg, tmp_path)
    assert result.monitor == "val/clip_roc_auc"
    aucs = [h["val/clip_roc_auc"] for h in result.history]
    assert all(0.0 <= a <= 1.0 for a in aucs)
    assert result.best_metrics["val/clip_roc_auc"] == max(aucs)
    assert result.best_epoch == aucs.index(max(aucs))      # the first of equals


def test_resume_refuses_changed_params(train_cfg: TrainConfig, tmp_path: Path) -> None:
    _fit(dataclasses.replace(train_cfg, epochs=1), tmp_path)
    with pytest.raises(ck.CheckpointError, match=r"train.learning_rate = 0.01, params now say "
                                                 r"0.02; delete"):
        _fit(dataclasses.replace(train_cfg, epochs=1, learning_rate=0.02), tmp_path)


def test_continual_learning_from_init_checkpoint(train_cfg: TrainConfig, tmp_path: Path) -> None:
    first = _fit(dataclasses.replace(train_cfg, epochs=1), tmp_path / "a")
    still = dataclasses.replace(train_cfg, epochs=1, learning_rate=1e-12, eta_min=0.0,
                                init_checkpoint=str(first.best_checkpoint))
    kept = _fit(dataclasses.replace(still, reset_optimizer=False), tmp_path / "b")
    for key, value in ck.model_state(first.model).items():
        torch.testing.assert_close(ck.model_state(kept.model)[key], value)
    steps = len(_data(False, train_cfg)[0])
    moments = ck.load_checkpoint(tmp_path / "b" / "epoch-0000.pt")["optimizer"]["state"][0]
    assert moments["step"].item() == 2 * steps              # Adam moments carried over
    _fit(still, tmp_path / "c")
    fresh = ck.load_checkpoint(tmp_path / "c" / "epoch-0000.pt")["optimizer"]["state"][0]
    assert fresh["step"].item() == steps
    with pytest.raises(ck.CheckpointError, match="was trained on classes"):
        _fit(still, tmp_path / "d", binary=True)


def test_init_checkpoint_accepts_a_detector_file(train_cfg: TrainConfig, tmp_path: Path) -> None:
    from leakpipe.config import FeatureConfig
    from leakpipe.detector import Detector, save_detector

    first = _fit(dataclasses.replace(train_cfg, epochs=1), tmp_path / "a")
    detector = tmp_path / "model.pt"
    features = load_section(PARAMS, "build").features
    assert isinstance(features, FeatureConfig)
    save_detector(detector, Detector(
        model=first.model, model_cfg=TINY_MODEL, class_names=KNOWN_CLASSES,
        data_class_names=KNOWN_CLASSES, binary=False, features=features,
        voting=VotingConfig(rule="long_vote", vote_fraction=0.5), threshold=0.5, metrics={},
        input_norm=train_cfg.input_norm))
    still = dataclasses.replace(train_cfg, epochs=1, learning_rate=1e-12, eta_min=0.0,
                                init_checkpoint=str(detector))
    tuned = _fit(still, tmp_path / "b")
    for key, value in ck.model_state(first.model).items():
        torch.testing.assert_close(ck.model_state(tuned.model)[key], value)
    with pytest.raises(ck.CheckpointError, match="holds no optimizer state"):
        _fit(dataclasses.replace(still, reset_optimizer=False), tmp_path / "c")
    other = "clip_band" if train_cfg.input_norm != "clip_band" else "none"
    with pytest.raises(ck.CheckpointError, match="expects input_norm"):
        _fit(dataclasses.replace(still, input_norm=other), tmp_path / "d")


def test_resume_refuses_a_different_loss_scaling(train_cfg: TrainConfig, tmp_path: Path) -> None:
    """A checkpoint without GradScaler state (CPU / bf16) is not resumed under fp16 scaling:
    one line naming the file instead of a bare error from GradScaler.load_state_dict."""
    _fit(dataclasses.replace(train_cfg, epochs=1), tmp_path)
    source, val, counts = _data(False, train_cfg)
    scaled = dataclasses.replace(RUNTIME, scaler=True)
    with pytest.raises(ck.CheckpointError, match="runtime.grad_scaler = False"):
        fit(TINY_MODEL, dataclasses.replace(train_cfg, epochs=1), runtime=scaled,
            decision=DECISION, train_source=source, val=val, class_counts=counts,
            tracker=NullTracker(), checkpoint_dir=tmp_path, features={"n_mels": N_MELS})
