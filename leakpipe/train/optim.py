"""Optimizer, learning-rate schedule, gradient accumulation, clipping and loss scaling.

AdamW (fused on CUDA) with weight decay only on weight matrices / kernels; a linear warmup then
cosine decay to ``eta_min``, stepped once per OPTIMIZER step by a ``LambdaLR``. The scheduler is
the only writer of the learning rate (the original's warmup overwrote it, so its schedule
was not the one configured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from leakpipe.config import TrainConfig

NO_CLIP = math.inf  # clip_grad_norm_ with an infinite bound only measures the norm


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay for tensors of rank >= 2 (weights, kernels); none for biases and norm scales."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def create_optimizer(model: nn.Module, cfg: TrainConfig,
                     device: torch.device) -> torch.optim.AdamW:
    fused = device.type == "cuda"  # the fused kernel exists for CUDA only
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                             fused=fused)


def warmup_cosine(step: int, *, warmup_steps: int, total_steps: int, min_factor: float) -> float:
    """LR factor after ``step`` optimizer steps: linear up to 1, then cosine down to min_factor.

    The factor reaches 1 at the last warmup step and ``min_factor`` after ``total_steps`` steps.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def steps_per_epoch(n_batches: int, accum_steps: int) -> int:
    """Optimizer steps in one epoch of ``n_batches`` micro-batches (the remainder steps too)."""
    return math.ceil(n_batches / accum_steps)


def create_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                     optimizer_steps_per_epoch: int) -> LambdaLR:
    total = cfg.epochs * optimizer_steps_per_epoch
    warmup = round(cfg.warmup_epochs * optimizer_steps_per_epoch)
    factor = partial(warmup_cosine, warmup_steps=warmup, total_steps=total,
                     min_factor=cfg.eta_min / cfg.learning_rate)
    return LambdaLR(optimizer, factor)


@dataclass
class Optimization:
    """Everything that turns a loss into a parameter update."""

    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    scaler: torch.amp.GradScaler
    accum_steps: int
    clip_norm: float  # NO_CLIP when clipping is off

    def backward(self, loss: Tensor) -> None:
        """Accumulate the gradients of one micro-batch."""
        self.scaler.scale(loss / self.accum_steps).backward()

    def step(self, model: nn.Module) -> Tensor:
        """Unscale, clip, step, advance the schedule; returns the pre-clip grad norm (device).

        With loss scaling on, a step whose gradients overflowed is skipped by the GradScaler
        (which then lowers its scale); the schedule advances only with steps that were taken,
        so skipped steps do not eat into the warmup or the cosine decay.
        """
        self.scaler.unscale_(self.optimizer)
        norm = nn.utils.clip_grad_norm_(model.parameters(), self.clip_norm)
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if scale is None or self.scaler.get_scale() >= scale:   # a lower scale: skipped
            self.scheduler.step()
        return norm

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])


def create_optimization(model: nn.Module, cfg: TrainConfig, device: torch.device,
                        optimizer_steps_per_epoch: int, scaler_enabled: bool) -> Optimization:
    optimizer = create_optimizer(model, cfg, device)
    return Optimization(
        optimizer=optimizer,
        scheduler=create_scheduler(optimizer, cfg, optimizer_steps_per_epoch),
        scaler=torch.amp.GradScaler(device.type, enabled=scaler_enabled),
        accum_steps=cfg.grad_accum_steps,
        clip_norm=cfg.grad_clip_norm if cfg.grad_clip else NO_CLIP)
