"""Optimizer groups, warmup + cosine schedule (the only writer of lr), accumulation, clipping."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from leakpipe.config import TrainConfig, load_section
from leakpipe.model import LeakCNN
from leakpipe.train.optim import (
    NO_CLIP,
    create_optimization,
    create_optimizer,
    param_groups,
    steps_per_epoch,
    warmup_cosine,
)
from tests.conftest import PARAMS

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny tensors: one thread is faster and immune to a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cfg() -> TrainConfig:
    base = load_section(PARAMS, "train")
    return dataclasses.replace(base, learning_rate=1e-2, eta_min=1e-4, epochs=4,
                               warmup_epochs=1.0, grad_accum_steps=1, grad_clip=False)


def _tiny() -> nn.Module:
    torch.manual_seed(0)
    return LeakCNN(2, widths=(2, 4, 4), dropout=0.0, pool_h=2, hidden=8)


def test_no_weight_decay_on_biases() -> None:
    decay, no_decay = param_groups(_tiny(), 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"])
    assert all(p.ndim == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(_tiny().parameters()))


def test_fused_adamw_only_on_cuda(cfg: TrainConfig) -> None:
    opt = create_optimizer(_tiny(), cfg, CPU)
    assert isinstance(opt, torch.optim.AdamW)
    assert not opt.param_groups[0]["fused"]


@pytest.mark.parametrize(("n_batches", "accum", "steps"), [(10, 1, 10), (10, 3, 4), (2, 4, 1)])
def test_steps_per_epoch_counts_the_remainder(n_batches: int, accum: int, steps: int) -> None:
    assert steps_per_epoch(n_batches, accum) == steps


def _lr_curve(cfg: TrainConfig, steps_per_ep: int) -> list[float]:
    model = _tiny()
    optim = create_optimization(model, cfg, CPU, steps_per_ep, scaler_enabled=False)
    curve = []
    for _ in range(cfg.epochs * steps_per_ep):
        curve.append(optim.optimizer.param_groups[0]["lr"])   # lr used by this step
        model(torch.randn(2, 1, 8, 1))[0].sum().backward()
        optim.step(model)
    return [*curve, optim.optimizer.param_groups[0]["lr"]]   # and the lr after the last step


def test_warmup_then_cosine_curve(cfg: TrainConfig) -> None:
    curve = _lr_curve(cfg, steps_per_ep=5)                    # 5 warmup + 15 cosine steps
    assert curve[:5] == pytest.approx([2e-3, 4e-3, 6e-3, 8e-3, 1e-2])
    assert all(a < b for a, b in zip(curve[:4], curve[1:5], strict=True))   # monotone warmup
    cosine = curve[5:]
    assert all(a >= b for a, b in zip(cosine, cosine[1:], strict=False))   # monotone decay
    mid = 1e-4 + (1e-2 - 1e-4) * 0.5 * (1 + math.cos(math.pi * 7 / 15))
    assert curve[12] == pytest.approx(mid)
    assert curve[-1] == pytest.approx(1e-4)                   # ends at eta_min
    jumps = [abs(b - a) for a, b in zip(curve, curve[1:], strict=False)]
    assert max(jumps) <= 2e-3 + 1e-12                         # no jump bigger than a warmup step


def test_no_warmup_starts_at_peak() -> None:
    assert warmup_cosine(0, warmup_steps=0, total_steps=10, min_factor=0.1) == 1.0
    assert warmup_cosine(10, warmup_steps=0, total_steps=10, min_factor=0.1) == \
        pytest.approx(0.1)
    assert warmup_cosine(99, warmup_steps=0, total_steps=10, min_factor=0.1) == \
        pytest.approx(0.1)


class _WriteSpy(dict):
    """A param group that records which source file writes its 'lr'."""

    writers: list[str] = []

    def __setitem__(self, key, value) -> None:
        if key == "lr":
            _WriteSpy.writers.append(Path(sys._getframe(1).f_code.co_filename).name)
        super().__setitem__(key, value)


def test_the_scheduler_is_the_only_writer_of_lr(cfg: TrainConfig) -> None:
    model = _tiny()
    optim = create_optimization(model, dataclasses.replace(cfg, grad_accum_steps=2), CPU, 6,
                                scaler_enabled=False)
    optim.optimizer.param_groups[:] = [_WriteSpy(g) for g in optim.optimizer.param_groups]
    _WriteSpy.writers.clear()
    for micro in range(1, 13):
        optim.backward(model(torch.randn(4, 1, 8, 1))[0].pow(2).mean())
        if micro % optim.accum_steps == 0:
            optim.step(model)
    assert len(_WriteSpy.writers) == 6 * 2                   # 6 steps x 2 param groups
    assert set(_WriteSpy.writers) == {"lr_scheduler.py"}


def test_accumulation_equals_one_big_batch(cfg: TrainConfig) -> None:
    x, target = torch.randn(8, 1, 8, 1), torch.randn(8, 2)
    results = []
    for accum, chunks in [(1, 1), (2, 2)]:
        model = _tiny()
        optim = create_optimization(model, dataclasses.replace(cfg, grad_accum_steps=accum),
                                    CPU, 1, scaler_enabled=False)
        for part_x, part_t in zip(x.chunk(chunks), target.chunk(chunks), strict=True):
            optim.backward((model(part_x)[0] - part_t).pow(2).mean())
        optim.step(model)
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(results[0], results[1])


def _big_loss(model: nn.Module) -> torch.Tensor:
    logits, leak_logit = model(torch.randn(4, 1, 8, 1))
    return 100 * (logits.sum() + leak_logit.sum())


def test_clipping_bounds_the_norm_and_returns_the_raw_norm(cfg: TrainConfig) -> None:
    model = _tiny()
    optim = create_optimization(model, dataclasses.replace(cfg, grad_clip=True,
                                                           grad_clip_norm=1e-3), CPU, 1,
                                scaler_enabled=False)
    optim.optimizer.zero_grad = lambda set_to_none=True: None  # keep the grads visible
    _big_loss(model).backward()
    raw = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    norm = optim.step(model)
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert norm.item() == pytest.approx(raw.item(), rel=1e-5)
    assert clipped.item() == pytest.approx(1e-3, rel=1e-3)


def test_clipping_off_measures_without_touching(cfg: TrainConfig) -> None:
    model = _tiny()
    optim = create_optimization(model, cfg, CPU, 1, scaler_enabled=False)
    assert optim.clip_norm == NO_CLIP
    optim.optimizer.zero_grad = lambda set_to_none=True: None  # keep the grads visible
    _big_loss(model).backward()
    before = [p.grad.clone() for p in model.parameters()]
    norm = optim.step(model)
    assert math.isfinite(norm.item()) and norm.item() > 1e-3
    for b, p in zip(before, model.parameters(), strict=True):
        assert torch.equal(b, p.grad)


def test_a_step_the_grad_scaler_skips_does_not_advance_the_schedule(cfg: TrainConfig) -> None:
    """An overflowed step (the GradScaler skips it and halves its scale) leaves the weights
    and the learning-rate schedule where they were; the next good step moves both."""
    cfg = dataclasses.replace(cfg, epochs=1, warmup_epochs=0.5)
    model = _tiny()
    optim = create_optimization(model, cfg, CPU, 4, scaler_enabled=True)
    assert optim.scaler.is_enabled()
    weights = [p.detach().clone() for p in model.parameters()]
    scale, lr = optim.scaler.get_scale(), optim.lr
    optim.backward(_big_loss(model) * math.inf)             # every gradient overflows
    optim.step(model)
    assert optim.scaler.get_scale() < scale                  # skipped
    assert optim.scheduler.last_epoch == 0 and optim.lr == lr
    assert all(torch.equal(w, p) for w, p in zip(weights, model.parameters(), strict=True))
    optim.backward(_big_loss(model))
    optim.step(model)
    assert optim.scheduler.last_epoch == 1 and optim.lr != lr
    assert not all(torch.equal(w, p) for w, p in zip(weights, model.parameters(), strict=True))
