"""The training loop and per-epoch validation on tiny in-memory data: perfect and collapsed
predictions, on-device accumulation, file normalisation, the exact inference form, precision
resolution, deterministic torch set-up and the train params' checks. fit() itself: test_fit.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from leakpipe.config import ConfigError, TrainConfig, from_mapping, load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.input_norm import normalize_clips
from leakpipe.data.schema import leak_index, task_classes, task_labels
from leakpipe.model import create_model
from leakpipe.runtime import make_runtime
from leakpipe.train import loop
from leakpipe.train.fit import configure_torch
from leakpipe.train.loop import train_one_epoch
from leakpipe.train.losses import LossConfig, build_loss
from leakpipe.train.optim import create_optimization
from leakpipe.train.validation import validate
from tests.conftest import PARAMS
from tests.helpers_fit import (
    CPU,
    DECISION,
    N_LONG,
    N_MELS,
    N_SHORT,
    RUNTIME,
    TINY_MODEL,
    _data,
    _files,
    tiny_train_cfg,
    torch_globals,
    val_split,
)

AUGMENT = dataclasses.asdict(load_section(PARAMS, "train").augment)


_torch_globals = pytest.fixture(autouse=True)(torch_globals)


@pytest.fixture(scope="module")
def train_cfg() -> TrainConfig:
    return tiny_train_cfg()


# ---------------------------------------------------------------------------------------------
# the loop
# ---------------------------------------------------------------------------------------------


class Oracle(nn.Module):
    """Perfect predictions: mel band 0 of the input carries the task label."""

    def __init__(self, n_classes: int, leak_index: int) -> None:
        super().__init__()
        self.n_classes, self.leak_index = n_classes, leak_index
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        label = x[:, 0, 0, 0].round().long()                           # (B,)
        logits = 20.0 * nn.functional.one_hot(label, self.n_classes).float() - 10.0
        leak = torch.where(label == self.leak_index, 20.0, -20.0)
        return logits + 0 * self.unused, leak


COARSE = dataclasses.replace(DECISION, threshold_min=0.1, threshold_max=0.9,
                             threshold_step=0.1, prob_mode="blend", rule="long_vote")


@pytest.mark.parametrize(("binary", "leak_index"), [(False, 2), (True, 1)])
def test_perfect_predictions_give_f1_one_in_both_modes(binary: bool, leak_index: int) -> None:
    raw = np.array([0, 1, 3, 4, 0, 3, 2, 2, 2])                 # every leak at the end
    labels = task_labels(raw, KNOWN_CLASSES, binary)
    mel = np.zeros((len(raw), N_LONG, N_SHORT, N_MELS, 1), dtype=np.float32)
    mel[..., 0, 0] = labels[:, None, None]
    val = val_split(mel, labels, task_classes(KNOWN_CLASSES, binary))
    assert val.leak_index == leak_index
    model = Oracle(len(val.class_names), leak_index)
    loss_fn = build_loss(LossConfig.from_train(load_section(PARAMS, "train")),
                         np.bincount(labels).tolist(), leak_index)
    result = validate(model, val, loss_fn, COARSE, RUNTIME)
    assert result.seg_probs.shape == (9, N_LONG, N_SHORT)     # every segment of the split
    assert result.file["f1"] == 1.0 and result.segment["f1"] == 1.0
    assert result.accuracy == 1.0 and result.diagnosis is None
    assert result.pred_counts[leak_index] == 3 * N_LONG * N_SHORT


def test_collapse_is_diagnosed_in_the_metrics() -> None:
    class AlwaysLeak(Oracle):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return super().forward(torch.full_like(x, 2.0))

    labels = np.array([0, 1, 2, 3])
    val = val_split(np.zeros((4, N_LONG, N_SHORT, N_MELS, 1), np.float32), labels,
                    KNOWN_CLASSES)
    loss_fn = build_loss(LossConfig.from_train(load_section(PARAMS, "train")), [1] * 5, 2)
    result = validate(AlwaysLeak(5, 2), val, loss_fn, COARSE, RUNTIME)
    assert result.diagnosis == (
        "collapse: all 4 samples predicted LEAK (3 false positives; check leak_weight_boost, "
        "leak_oversample_factor and leak_aux_weight); collapse: 100.0 % of segments predicted "
        "LEAK (true share 25.0 %)")
    assert result.metrics()["val/pred_share/LEAK"] == 1.0


def _counting_sync(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = loop._sync

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "_sync", counted)
    return calls


@pytest.mark.parametrize(("log_every", "syncs"), [(0, 1), (1, 4), (2, 2)])
def test_train_epoch_accumulates_on_device_and_syncs_once(
        train_cfg: TrainConfig, monkeypatch: pytest.MonkeyPatch, log_every: int,
        syncs: int) -> None:
    source, val, counts = _data(False, train_cfg)               # 240 segments, 8 batches
    cfg = dataclasses.replace(train_cfg, grad_accum_steps=3)
    torch.manual_seed(0)
    model = create_model(TINY_MODEL, 5)
    optim = create_optimization(model, cfg, CPU, 3, scaler_enabled=False)
    loss_fn = build_loss(LossConfig.from_train(cfg), counts, val.leak_index)
    calls = _counting_sync(monkeypatch)
    result = train_one_epoch(model, source.epoch(0), loss_fn, optim, RUNTIME,
                             log_every=log_every)
    assert len(calls) == syncs
    assert (result.n_segments, result.optimizer_steps) == (240, 3)   # 8 batches / 3 -> 3 steps
    assert 0.0 <= result.accuracy <= 1.0 and np.isfinite(result.loss)
    assert 0 < result.grad_norm_mean <= result.grad_norm_max
    assert result.loss == pytest.approx(result.loss_class + cfg.leak_aux_weight * result.loss_aux)


def test_validation_normalises_each_file_as_the_model_expects(train_cfg: TrainConfig) -> None:
    mel, raw = _files(4, 1)
    classes = task_classes(KNOWN_CLASSES, False)
    loss_fn = build_loss(LossConfig.from_train(train_cfg), [1] * 5, leak_index(classes))
    torch.manual_seed(0)
    model = create_model(TINY_MODEL, 5)
    got = validate(model, val_split(mel, raw, classes, 6, "clip_band"), loss_fn, COARSE,
                   RUNTIME)
    normalised = normalize_clips(torch.from_numpy(mel), "clip_band").numpy()
    want = validate(model, val_split(normalised, raw, classes, 6), loss_fn, COARSE, RUNTIME)
    np.testing.assert_allclose(got.seg_probs, want.seg_probs, atol=1e-6)
    plain = validate(model, val_split(mel, raw, classes, 6), loss_fn, COARSE, RUNTIME)
    assert not np.allclose(plain.seg_probs, got.seg_probs)


def test_validation_runs_the_exact_inference_form(train_cfg: TrainConfig) -> None:
    """Per-epoch validation scores LeakCNN's inference form; the figures match the module's."""
    mel, raw = _files(4, 1)
    classes = task_classes(KNOWN_CLASSES, False)
    loss_fn = build_loss(LossConfig.from_train(train_cfg), [1] * 5, leak_index(classes))
    torch.manual_seed(0)
    model = create_model(TINY_MODEL, 5).eval()
    val = val_split(mel, raw, classes, 6)
    result = validate(model, val, loss_fn, COARSE, RUNTIME)
    x = torch.from_numpy(mel.astype(np.float32)).reshape(-1, 1, N_MELS, 1)
    with torch.inference_mode():
        logits, aux = model(x)
    want = 0.5 * torch.softmax(logits, -1)[:, 2] + 0.5 * torch.sigmoid(aux)
    np.testing.assert_allclose(result.seg_probs.reshape(-1), want.numpy(), atol=1e-5)


def test_bf16_autocast_trains_on_cpu(train_cfg: TrainConfig) -> None:
    source, val, counts = _data(False, train_cfg)
    model = create_model(TINY_MODEL, 5)
    optim = create_optimization(model, train_cfg, CPU, len(source), scaler_enabled=False)
    result = train_one_epoch(model, source.epoch(0), build_loss(
        LossConfig.from_train(train_cfg), counts, val.leak_index), optim,
        make_runtime("cpu", "bf16"))
    assert np.isfinite(result.loss) and result.skipped_steps == 0


@pytest.mark.parametrize(("amp", "device", "dtype", "enabled", "scaler"), [
    ("auto", "cpu", None, False, False),
    ("auto", "cuda", torch.float16, True, True),
    ("fp16", "cuda", torch.float16, True, True),
    ("bf16", "cuda", torch.bfloat16, True, False),
    ("bf16", "cpu", torch.bfloat16, True, False),
    ("off", "cuda", None, False, False),
])
def test_precision_resolution(amp: str, device: str, dtype, enabled: bool,
                              scaler: bool) -> None:
    runtime = make_runtime(torch.device(device), amp, channels_last=True)
    assert (runtime.amp, runtime.scaler) == (enabled, scaler)
    assert dtype is None or runtime.amp_dtype == dtype
    assert runtime.channels_last == (device == "cuda")          # applied on CUDA only


def test_configure_torch_is_deterministic_on_cpu(train_cfg: TrainConfig) -> None:
    configure_torch(train_cfg, RUNTIME)
    assert torch.are_deterministic_algorithms_enabled()
    first = torch.rand(3)
    configure_torch(train_cfg, RUNTIME)
    assert torch.equal(first, torch.rand(3))                   # seeded


@pytest.mark.parametrize(("change", "message"), [
    ({"eta_min": 0.1, "learning_rate": 0.01}, "train.eta_min: must not exceed learning_rate"),
    ({"warmup_epochs": 5.0, "epochs": 2}, "train.warmup_epochs: must not exceed epochs"),
    ({"batch_size": 0}, "train.batch_size: must be >= 1"),
    ({"input_norm": "pcen"}, "train.input_norm: expected one of"),
    ({"augment": {**AUGMENT, "mix_snr_min_db": 30.0}},
     "train.augment.mix_snr_min_db: must not exceed mix_snr_max_db"),
    ({"augment": {**AUGMENT, "gain_db": -1.0}}, "train.augment.gain_db: must be >= 0"),
])
def test_train_params_are_checked(train_cfg: TrainConfig, change: dict, message: str) -> None:
    raw = {**dataclasses.asdict(train_cfg), **change}
    with pytest.raises(ConfigError, match=message):
        from_mapping(TrainConfig, raw, "train", "params.yaml")
