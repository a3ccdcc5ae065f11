"""Training losses: class-weighted cross-entropy or focal loss, plus the auxiliary leak BCE.

Pure functions of logits and labels; ``build_loss`` binds them to the params. The leak index
is passed in (derived from the class names by the caller), never assumed. A non-finite loss
raises ``NonFiniteLossError`` naming every loss component (detectron2-style fail fast);
``NonFiniteWatch`` records the first bad step on the device so the loop need not sync per step.

Label smoothing (``train.label_smoothing`` = eps) replaces every one-hot class target by
(1 - eps) one-hot + eps / C, in both class losses, and the aux leak targets 0 / 1 by eps / 2,
1 - eps / 2 (the same rule with C = 2), so both heads are kept from certainty alike. At 0 every
loss is computed exactly as without it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from leakpipe.config import TrainConfig
from leakpipe.errors import LeakpipeError

PART_NAMES = ("total", "class", "aux")  # order of LossParts.stack()


class NonFiniteLossError(LeakpipeError, FloatingPointError):
    """The loss became NaN or infinite; the message lists the loss components."""


@dataclass(frozen=True)
class LossParts:
    """Scalar loss tensors: ``total = class + aux_weight * aux``."""

    total: Tensor
    cls: Tensor
    aux: Tensor

    def stack(self) -> Tensor:
        return torch.stack([self.total.detach(), self.cls.detach(), self.aux.detach()])  # (3,)


LossFn = Callable[[Tensor, Tensor, Tensor], LossParts]


@dataclass(frozen=True)
class LossConfig:
    """The loss subset of the `train` params."""

    kind: Literal["ce", "focal"]
    focal_gamma: float
    focal_alpha: float
    leak_weight_boost: float
    leak_aux_weight: float
    leak_oversample_factor: int
    label_smoothing: float = 0.0

    @classmethod
    def from_train(cls, cfg: TrainConfig) -> LossConfig:
        return cls(kind=cfg.loss, focal_gamma=cfg.focal_gamma, focal_alpha=cfg.focal_alpha,
                   leak_weight_boost=cfg.leak_weight_boost, leak_aux_weight=cfg.leak_aux_weight,
                   leak_oversample_factor=cfg.leak_oversample_factor,
                   label_smoothing=cfg.label_smoothing)


def oversampled_counts(counts: Sequence[int], leak_index: int, factor: int) -> list[float]:
    """Class counts as the loss sees them when LEAK files are drawn ``factor`` times as often."""
    return [float(c * factor if i == leak_index else c) for i, c in enumerate(counts)]


def class_weights(counts: Sequence[float], leak_index: int, leak_boost: float) -> Tensor:
    """Inverse class frequency normalised to mean 1 over present classes; LEAK x leak_boost.

    Absent classes get weight 0 (they never occur as targets). Weights are computed from the
    counts the loss actually sees, so oversampling and weighting do not stack (stacked,
    they over-weight LEAK until the model calls everything a leak).
    """
    counts_t = torch.as_tensor(counts, dtype=torch.float64)  # (C,)
    present = counts_t > 0
    inverse = torch.where(present, 1.0 / counts_t.clamp(min=1e-12), torch.zeros_like(counts_t))
    weights = inverse / inverse[present].mean()
    weights[leak_index] *= leak_boost
    return weights.float()


def weighted_ce(logits: Tensor, y: Tensor, weight: Tensor | None = None,
                smoothing: float = 0.0) -> Tensor:
    """Cross-entropy, weighted mean over the batch (sum w_y * l / sum w_y).

    ``smoothing`` is torch's ``label_smoothing``: with class weights its eps / C part weighs
    each class's log-probability by that class's weight (absent classes, weight 0, get none).
    """
    return F.cross_entropy(logits.float(), y, weight=weight,   # logits (B, C), y (B,)
                           label_smoothing=smoothing)


def focal_loss(logits: Tensor, y: Tensor, *, gamma: float, alpha: float,
               leak_index: int, smoothing: float = 0.0) -> Tensor:
    """Mean of -alpha_t (1 - p_t)^gamma log p_t; alpha_t = alpha for LEAK, 1 - alpha otherwise.

    With ``smoothing`` eps: the mean of -sum_c q_c alpha_c (1 - p_c)^gamma log p_c over the
    smoothed targets q = (1 - eps) one-hot + eps / C (the same at eps = 0).
    """
    if smoothing:
        return _smoothed_focal(logits, y, gamma=gamma, alpha=alpha, leak_index=leak_index,
                               smoothing=smoothing)
    log_p = F.log_softmax(logits.float(), dim=-1).gather(1, y[:, None]).squeeze(1)  # (B,)
    alpha_t = torch.where(y == leak_index, alpha, 1.0 - alpha)                       # (B,)
    return (-alpha_t * (1.0 - log_p.exp()).pow(gamma) * log_p).mean()


def _smoothed_focal(logits: Tensor, y: Tensor, *, gamma: float, alpha: float,
                    leak_index: int, smoothing: float) -> Tensor:
    log_p = F.log_softmax(logits.float(), dim=-1)                                   # (B, C)
    n_classes = log_p.shape[-1]
    target = torch.full_like(log_p, smoothing / n_classes)
    target.scatter_add_(1, y[:, None], torch.full_like(log_p[:, :1], 1.0 - smoothing))
    alpha_c = torch.full((n_classes,), 1.0 - alpha, device=log_p.device)
    alpha_c[leak_index] = alpha                                                       # (C,)
    per_class = alpha_c * (1.0 - log_p.exp()).pow(gamma) * log_p                      # (B, C)
    return -(target * per_class).sum(dim=1).mean()


def leak_aux_bce(leak_logit: Tensor, y: Tensor, leak_index: int,
                 smoothing: float = 0.0) -> Tensor:
    """BCE-with-logits of the auxiliary head against (label == leak index), with ``smoothing``
    eps against eps / 2 and 1 - eps / 2."""
    target = (y == leak_index).float()                                  # (B,)
    if smoothing:
        target = target * (1.0 - smoothing) + smoothing / 2
    return F.binary_cross_entropy_with_logits(leak_logit.float(), target)


def combined_loss(logits: Tensor, leak_logit: Tensor, y: Tensor, *,
                  class_loss: Callable[[Tensor, Tensor], Tensor], leak_index: int,
                  aux_weight: float, smoothing: float = 0.0) -> LossParts:
    """class loss + aux_weight x auxiliary leak BCE (``smoothing``: of the aux targets)."""
    cls = class_loss(logits, y)
    aux = leak_aux_bce(leak_logit, y, leak_index, smoothing)
    return LossParts(total=cls + aux_weight * aux, cls=cls, aux=aux)


def build_loss(cfg: LossConfig, class_counts: Sequence[int], leak_index: int,
               device: torch.device | str = "cpu") -> LossFn:
    """The loss function ``(logits, leak_logit, y) -> LossParts`` described by ``cfg``."""
    if cfg.kind == "focal":
        class_loss = functools.partial(focal_loss, gamma=cfg.focal_gamma, alpha=cfg.focal_alpha,
                                       leak_index=leak_index, smoothing=cfg.label_smoothing)
    else:
        counts = oversampled_counts(class_counts, leak_index, cfg.leak_oversample_factor)
        weight = class_weights(counts, leak_index, cfg.leak_weight_boost).to(device)
        class_loss = functools.partial(weighted_ce, weight=weight,
                                       smoothing=cfg.label_smoothing)
    return functools.partial(combined_loss, class_loss=class_loss, leak_index=leak_index,
                             aux_weight=cfg.leak_aux_weight, smoothing=cfg.label_smoothing)


def describe_parts(values: Sequence[float]) -> str:
    """'total=nan class=nan aux=0.6931' for a (total, class, aux) sequence."""
    return " ".join(f"{name}={value:.6g}" for name, value in zip(PART_NAMES, values, strict=True))


def check_finite(parts: LossParts, where: str) -> None:
    """Raise ``NonFiniteLossError`` naming the components when ``parts.total`` is not finite."""
    values = parts.stack().tolist()
    if not torch.isfinite(torch.tensor(values[0])):
        raise NonFiniteLossError(f"non-finite loss {where}: {describe_parts(values)}")


class NonFiniteWatch:
    """Device-side record of the first step whose total loss was NaN / inf (no host sync).

    ``record()`` is a (5,) tensor [seen, total, class, aux, step] the caller transfers together
    with its other accumulators; ``check`` raises from those host values.
    """

    RECORD_SIZE = len(PART_NAMES) + 2

    def __init__(self, device: torch.device | str) -> None:
        self.first = torch.full((len(PART_NAMES) + 1,), float("nan"), device=device)  # (4,)
        self.seen = torch.zeros((), dtype=torch.bool, device=device)

    def update(self, parts: LossParts, step: int) -> None:
        bad = ~torch.isfinite(parts.total.detach())
        entry = torch.cat([parts.stack().float(), parts.total.new_tensor([step]).float()])
        self.first = torch.where(bad & ~self.seen, entry, self.first)
        self.seen = self.seen | bad

    def record(self) -> Tensor:
        return torch.cat([self.seen.float()[None], self.first])     # (5,)

    @staticmethod
    def check(values: Sequence[float], where: str) -> None:
        """Raise ``NonFiniteLossError`` from a host copy of ``record()``."""
        if values[0]:
            raise NonFiniteLossError(
                f"non-finite loss {where}, first at step {int(values[-1])}: "
                f"{describe_parts(values[1:-1])} (check the inputs for NaN / inf, lower "
                "train.learning_rate or enable train.grad_clip)")

    def raise_if_seen(self, where: str) -> None:
        """One host sync; raises with the first bad step's components."""
        self.check(self.record().tolist(), where)
