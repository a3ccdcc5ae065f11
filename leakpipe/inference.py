"""The inference form of a trained LeakCNN: the same function with fewer operations.

Evaluate and predict run the network many times over and never train it, so they run this form.
With one frame per segment (the default features: 64 mels x 1 frame) the 3x3 convolutions only
ever meet zero padding in their left and right kernel columns; each equals a 1-D convolution
along the mel axis with the middle column, a third of the multiply-adds. Two more exact
rewrites: the adaptive average pool is skipped when the mel axis already has ``pool_h`` rows
(it is the identity then), and ReLU runs after max pooling (both are monotone, so they commute)
on half the values. Dropout is the identity in eval mode and is left out. A network with
``level_input`` computes its level features as LeakCNN does (a copy of them, in eval mode).

The outputs equal LeakCNN's up to float summation order (tests compare them); any other frame
count, or a network that is not a plain LeakCNN, is run as it is.
"""

from __future__ import annotations

import copy
import logging

import torch
import torch.nn.functional as F
from torch import nn

from leakpipe.model import KERNEL, PADDING, POOL, LeakCNN, segment_level, tonal_median

log = logging.getLogger(__name__)

SINGLE_FRAME = 1


class MelConvNet(nn.Module):
    """LeakCNN on (B, 1, n_mels, 1) input as 1-D convolutions; forward -> (logits, leak_logit).

    Inference only: it shares the fully connected layers with the LeakCNN it came from and holds
    copies of the convolution weights, so it is built again whenever those weights change.
    """

    def __init__(self, model: LeakCNN) -> None:
        super().__init__()
        convs = [m for m in model.features.modules() if isinstance(m, nn.Conv2d)]
        self.conv1, self.conv2, self.conv3 = (_middle_column(c) for c in convs)
        self.pool = POOL[0]
        self.pool_h = _pool_height(model)
        self.tonal_median = model.tonal_median
        self.fc, self.head, self.leak_head = model.fc, model.head, model.leak_head
        # a copy: its batch-norm statistics are those of now, and eval() must not switch the
        # training model's module (training continues after each validation)
        self.level = copy.deepcopy(model.level) if model.level is not None else None
        self.eval()

    def train(self, mode: bool = True) -> MelConvNet:
        if mode:
            raise RuntimeError("MelConvNet is an inference form; train the LeakCNN it came from")
        return super().train(False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        extra = None
        if self.level is not None:
            level = segment_level(x)                                # (B, 1, 1, 1)
            extra = self.level(x, level)                            # (B, 1 + LEVEL_BANDS)
            x = x - level
        x = tonal_median(x, self.tonal_median)
        h = F.relu_(self.conv1(x[..., 0]))                          # (B, c1, M)
        h = F.relu_(max_pool(self.conv2(h), self.pool))             # (B, c2, M / 2)
        h = F.relu_(max_pool(self.conv3(h), self.pool))             # (B, c3, M / 4)
        if h.shape[-1] != self.pool_h:
            h = F.adaptive_avg_pool1d(h, self.pool_h)               # (B, c3, pool_h)
        h = torch.flatten(h, 1)                                     # (B, c3 * pool_h)
        if extra is not None:
            h = torch.cat([h, extra], dim=1)
        h = self.fc(h)                                              # (B, hidden)
        return self.head(h), self.leak_head(h).squeeze(-1)          # (B, C), (B,)


def max_pool(h: torch.Tensor, size: int) -> torch.Tensor:
    """``F.max_pool1d(h, size)``; pairs as one elementwise maximum of two strided views.

    Measured on a 2-core AVX-512 CPU: 1.4x faster than max_pool1d for pairs.
    """
    if size != 2:
        return F.max_pool1d(h, size)
    end = h.shape[-1] // 2 * 2                                      # floor, as max_pool1d
    return torch.maximum(h[..., 0:end:2], h[..., 1:end:2])


def _middle_column(conv: nn.Conv2d) -> nn.Conv1d:
    """The 1-D convolution a 3x3 one performs on width-1 input with padding 1."""
    # skip_init: the weights are copied below, and a random init would draw from the global
    # torch generator; per-epoch validation builds this form, so training's dropout and
    # augmentation would then depend on whether (and how often) it validated.
    out = nn.utils.skip_init(nn.Conv1d, conv.in_channels, conv.out_channels, KERNEL,
                             padding=PADDING, device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        out.weight.copy_(conv.weight[:, :, :, PADDING])             # (out, in, KERNEL)
        out.bias.copy_(conv.bias)
    out.requires_grad_(False)
    return out


def _pool_height(model: LeakCNN) -> int:
    pool = model.features[-1]
    assert isinstance(pool, nn.AdaptiveAvgPool2d)
    size = pool.output_size
    return int(size[0] if isinstance(size, tuple) else size)


def has_inference_form(model: nn.Module, n_frames: int) -> bool:
    """True when ``inference_form`` can rewrite ``model`` for segments of ``n_frames`` frames."""
    if type(model) is not LeakCNN or n_frames != SINGLE_FRAME:
        return False
    convs = [m for m in model.features.modules() if isinstance(m, nn.Conv2d)]
    return len(convs) == 3 and all(
        c.kernel_size == (KERNEL, KERNEL) and c.padding == (PADDING, PADDING)
        and c.stride == (1, 1) and c.dilation == (1, 1) and c.groups == 1
        and c.bias is not None for c in convs)


def inference_form(model: nn.Module, n_frames: int) -> nn.Module:
    """The fastest exact form of ``model`` for inference on segments of ``n_frames`` frames."""
    if has_inference_form(model, n_frames):
        return MelConvNet(model)
    log.debug("inference form: %s with %d frames runs unchanged", type(model).__name__,
              n_frames)
    return model.eval()
