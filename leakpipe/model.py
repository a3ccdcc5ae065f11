"""The network: ``LeakCNN``, the original system's LeakCNNMulti with the same layers and init.

One segment's log-mel (1, n_mels, n_frames) goes through three 3x3 convolutions with two
height-only max pools, an adaptive average pool to (pool_h, 1), dropout and one hidden fully
connected layer, then two heads: the class logits and one auxiliary leak logit.

``SegmentScorer`` is its serving form (the model logged to MLflow): one output tensor of class
probabilities plus the segment leak probability, so a pyfunc ``predict`` returns one array.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch
from torch import nn

from leakpipe.config import ModelConfig
from leakpipe.decision.voting import ProbMode, segment_leak_prob

log = logging.getLogger(__name__)

WRAPPER_PREFIXES = ("_orig_mod.", "module.")  # torch.compile, DistributedDataParallel
KERNEL = 3      # conv kernel size (square)
PADDING = 1     # keeps height and width
POOL = (2, 1)   # halves the mel axis, keeps the (usually single) frame axis


def _conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, KERNEL, padding=PADDING), nn.ReLU(inplace=True))


class LeakCNN(nn.Module):
    """Segment classifier with an auxiliary leak head; forward -> (logits, leak_logit)."""

    def __init__(self, n_classes: int, widths: tuple[int, int, int] = (32, 64, 128),
                 dropout: float = 0.3, pool_h: int = 16, hidden: int = 256) -> None:
        super().__init__()
        c1, c2, c3 = widths
        self.features = nn.Sequential(
            _conv(1, c1), _conv(c1, c2), nn.MaxPool2d(POOL),
            _conv(c2, c3), nn.MaxPool2d(POOL),
            nn.AdaptiveAvgPool2d((pool_h, 1)))
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Sequential(nn.Linear(c3 * pool_h, hidden), nn.ReLU(inplace=True))
        self.head = nn.Linear(hidden, n_classes)
        self.leak_head = nn.Linear(hidden, 1)
        self.apply(_kaiming_init)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(x)                      # (B, c3, pool_h, 1)
        h = self.dropout(torch.flatten(h, 1))     # (B, c3 * pool_h)
        h = self.fc(h)                            # (B, hidden)
        return self.head(h), self.leak_head(h).squeeze(-1)  # (B, C), (B,)


class SegmentScorer(nn.Module):
    """(B, 1, n_mels, n_frames) -> (B, C + 1): class probabilities, then the leak probability."""

    def __init__(self, model: nn.Module, leak_index: int, prob_mode: ProbMode) -> None:
        super().__init__()
        self.model = model
        self.leak_index = leak_index
        self.prob_mode = prob_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits, leak_logit = self.model(x.float())                  # (B, C), (B,)
        leak = segment_leak_prob(logits, leak_logit, self.leak_index, self.prob_mode)  # (B,)
        return torch.cat([torch.softmax(logits.float(), dim=-1), leak[:, None]], dim=1)


def _kaiming_init(module: nn.Module) -> None:
    """He-normal weights for ReLU layers, zero biases (as the original)."""
    if isinstance(module, nn.Conv2d | nn.Linear):
        nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        nn.init.zeros_(module.bias)


def create_model(cfg: ModelConfig, n_classes: int) -> LeakCNN:
    """Build the network described by the `model` params section."""
    model = LeakCNN(n_classes, widths=tuple(cfg.widths), dropout=cfg.dropout,
                    pool_h=cfg.pool_h, hidden=cfg.hidden)
    log.debug("LeakCNN: %d classes, %d parameters", n_classes, count_parameters(model))
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside torch.compile / DDP wrappers."""
    for attr in ("_orig_mod", "module"):
        inner = getattr(model, attr, None)
        if isinstance(inner, nn.Module):
            return unwrap(inner)
    return model


def strip_prefixes(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove wrapper prefixes from state-dict keys."""
    out = {}
    for key, value in state.items():
        while key.startswith(WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        out[key] = value
    return out


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return strip_prefixes(unwrap(model).state_dict())
