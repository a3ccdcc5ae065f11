"""Torch switches of a training run, set in one place: seeds, determinism, TF32, compile.

CPU runs use deterministic kernels and are bit-reproducible on one CPU model; on CUDA some
kernels (pooling backward) have no deterministic variant, so cuDNN autotuning and TF32 are on
instead. ``torch.compile`` raises ``CompileError`` instead of falling back: a silent fallback
trains a different, slower model than the one asked for.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn

from leakpipe.config import TrainConfig
from leakpipe.errors import LeakpipeError
from leakpipe.runtime import Runtime


class CompileError(LeakpipeError):
    """torch.compile failed; training never falls back to eager mode silently."""


def configure_torch(cfg: TrainConfig, runtime: Runtime) -> None:
    """Seeds and every torch performance / determinism switch, in one place."""
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    cuda = runtime.device.type == "cuda"
    # Deterministic kernels on CPU; on CUDA some (pooling backward) have no such variant.
    torch.use_deterministic_algorithms(not cuda, warn_only=False)
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def compile_model(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    """``torch.compile`` when asked; a failure raises ``CompileError``, never falls back."""
    if not cfg.compile:
        return model
    import torch._dynamo

    torch._dynamo.config.suppress_errors = False  # no silent eager fallback at first call
    try:
        return torch.compile(model, mode=cfg.compile_mode)
    except RuntimeError as exc:
        raise CompileError(f"train.compile: torch.compile(mode={cfg.compile_mode!r}) failed: "
                           f"{exc}") from exc
