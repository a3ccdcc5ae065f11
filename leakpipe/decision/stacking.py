"""The fused stacker: methods' recording probabilities -> one leak probability. Pure numpy.

Each method's probability becomes a logit (clipped to ``[PROB_EPS, 1 - PROB_EPS]`` first, so a
network's saturated 0 or 1 stays finite: the logit lies within ``+-LOGIT_MAX``), and the stacker
adds them up with one weight each plus a bias, as the logistic regression that grouped CV and
`ship` fit on the val recordings (``leakpipe.cv.recording_level.fit_stacker``) does:
``P = sigmoid(b + sum_i w_i z_i)``. Each term ``w_i z_i`` is that method's evidence, what it
moved the fused logit by from the bias (positive: towards LEAK): what `leakpipe explain` shows
of a fused detector's call.

The stacker takes the methods' logits, not their probabilities: a method that has a logit (the
statistics' linear model) hands it over clipped (``clip_logit``, the same number as the logit
of its clipped probability), so no float32 probability near 0 or 1 is taken apart again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PROB_EPS = 1e-6   # probabilities are clipped to [eps, 1 - eps] before their logit
LOGIT_MAX = math.log((1.0 - PROB_EPS) / PROB_EPS)   # the logit of 1 - eps


def logit(p: np.ndarray | float) -> np.ndarray:
    """log(p / (1 - p)) of ``p`` clipped to [PROB_EPS, 1 - PROB_EPS], float64."""
    p = np.clip(np.asarray(p, np.float64), PROB_EPS, 1.0 - PROB_EPS)
    return np.log(p / (1.0 - p))


def clip_logit(z: np.ndarray | float) -> np.ndarray:
    """A logit clipped as ``logit`` clips its probability: to [-LOGIT_MAX, LOGIT_MAX]."""
    return np.clip(np.asarray(z, np.float64), -LOGIT_MAX, LOGIT_MAX)


def sigmoid(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


@dataclass(frozen=True)
class Stacker:
    """Weights on the methods' recording logits, in ``names`` order, and a bias."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float

    def terms(self, logits: np.ndarray | Sequence[float]) -> np.ndarray:
        """(..., M) the methods' logits -> (..., M) each one's evidence ``w_i z_i``."""
        return clip_logit(logits) * np.asarray(self.weights, np.float64)

    def logit(self, logits: np.ndarray | Sequence[float]) -> np.ndarray:
        """(..., M) the methods' logits -> (...,) the fused logit."""
        return self.bias + self.terms(logits).sum(axis=-1)

    def prob(self, logits: np.ndarray | Sequence[float]) -> np.ndarray:
        """(..., M) the methods' logits -> (...,) the fused probability."""
        return sigmoid(self.logit(logits))

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "weights": [float(w) for w in self.weights],
                "bias": float(self.bias)}

    @classmethod
    def from_dict(cls, raw: Any) -> Stacker:
        """The stored form; ``ValueError`` naming what is wrong with it."""
        if not isinstance(raw, dict) or set(raw) != {"names", "weights", "bias"}:
            raise ValueError("stacker fields must be ['bias', 'names', 'weights']")
        out = cls(tuple(str(n) for n in raw["names"]),
                  tuple(float(w) for w in raw["weights"]), float(raw["bias"]))
        if len(out.names) != len(out.weights) or not out.names:
            raise ValueError(f"stacker: {len(out.names)} names but {len(out.weights)} weights")
        if not all(math.isfinite(v) for v in (*out.weights, out.bias)):
            raise ValueError(f"stacker: weights {out.weights} and bias {out.bias} must be "
                             "finite")
        return out


__all__ = ["LOGIT_MAX", "PROB_EPS", "Stacker", "clip_logit", "logit", "sigmoid"]
