"""The `logger_stats` model as a torch module: (B, S) recording statistics -> (B,) leak logit.

Standardise with the train means and scales (a missing statistic, NaN: a band above the
recording's Nyquist frequency, takes the train mean, i.e. 0 after standardising: it adds no
evidence either way), then one linear layer. It is fitted elsewhere
(``leakpipe.baselines.logger_stats``: an L2 logistic regression) and kept in this form so that
a detector of this kind is one torch file that predict, export (ONNX: ``isnan`` / ``where`` /
``linear`` have operators) and explain read like the CNN's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn


class LoggerStatsNet(nn.Module):
    """(B, S) statistics (NaN = missing) -> (B,) leak logit: standardise, impute, linear."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray,
                 intercept: float, names: Sequence[str]) -> None:
        super().__init__()
        self.names = tuple(names)
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float32))
        self.linear = nn.Linear(len(mean), 1)
        with torch.no_grad():
            self.linear.weight.copy_(torch.as_tensor(coef, dtype=torch.float32)[None, :])
            self.linear.bias.fill_(float(intercept))

    def standardised(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.where(torch.isnan(x), self.mean, x)                  # (B, S)
        return (x - self.mean) / self.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.standardised(x)).squeeze(-1)           # (B,)

    def contributions(self, x: torch.Tensor) -> torch.Tensor:
        """(B, S): coefficient x standardised value, what moved each score from the bias."""
        return self.standardised(x) * self.linear.weight[0]


__all__ = ["LoggerStatsNet"]
