"""From segment leak probabilities to file decisions (pure, vectorised; shared by train + evaluate).

Shapes: a split's segment probabilities are (F, L, S) = (files, long segments, short segments).
Each decision rule reduces a file to one score so that ``file is LEAK <=> score >= threshold``;
every threshold of a grid is then decided in one comparison, (K, 1) vs (1, F) -> (K, F).

- ``long_vote``: long-segment prob = mean of its short segments; LEAK when the fraction of long
  segments with prob >= threshold is >= vote_fraction (the paper's rule, vote_fraction 0.5).
- ``frac_vote``: the same vote over every short segment.
- ``mean``: the mean segment prob >= threshold.
- ``any_long``: any long segment prob >= threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

ProbMode = Literal["softmax", "aux", "blend"]
Rule = Literal["long_vote", "frac_vote", "mean", "any_long"]
PROB_MODES: tuple[str, ...] = ("softmax", "aux", "blend")
RULES: tuple[str, ...] = ("long_vote", "frac_vote", "mean", "any_long")
BLEND_SOFTMAX_WEIGHT = 0.5  # blend = 0.5 softmax[leak] + 0.5 sigmoid(aux), as the original
GRID_DECIMALS = 6           # thresholds are rounded so 0.1 + 0.1 + 0.1 prints as 0.3


@dataclass(frozen=True)
class VotingConfig:
    """How segment outputs become a file decision."""

    prob_mode: ProbMode = "blend"
    rule: Rule = "long_vote"
    vote_fraction: float = 0.5


def segment_leak_prob(logits: Tensor, leak_logit: Tensor, leak_index: int,
                      mode: ProbMode) -> Tensor:
    """Leak probability per segment: logits (N, C), leak_logit (N,) -> (N,)."""
    softmax = torch.softmax(logits.float(), dim=-1)[:, leak_index]   # (N,)
    aux = torch.sigmoid(leak_logit.float())                          # (N,)
    if mode == "softmax":
        return softmax
    if mode == "aux":
        return aux
    if mode == "blend":
        return BLEND_SOFTMAX_WEIGHT * softmax + (1.0 - BLEND_SOFTMAX_WEIGHT) * aux
    raise ValueError(f"prob_mode must be one of {PROB_MODES}, got {mode!r}")


def long_segment_probs(seg_probs: np.ndarray) -> np.ndarray:
    """(F, L, S) -> (F, L): mean over each long segment's short segments."""
    return np.asarray(seg_probs).mean(axis=-1)


def min_votes(n: int, fraction: float) -> int:
    """Smallest count c in 0..n with c / n >= fraction (n + 1 when none): exact, no rounding."""
    counts = np.arange(n + 1)
    ok = np.flatnonzero(counts / n >= fraction)
    return int(ok[0]) if ok.size else n + 1


def kth_largest(values: np.ndarray, k: int) -> np.ndarray:
    """(F, N) -> (F,): the k-th largest value per row; +inf for k = 0, -inf for k > N."""
    n = values.shape[-1]
    if k == 0:
        return np.full(values.shape[0], np.inf)
    if k > n:
        return np.full(values.shape[0], -np.inf)
    return np.partition(values, n - k, axis=-1)[:, n - k]


def file_scores(seg_probs: np.ndarray, rule: Rule, vote_fraction: float = 0.5) -> np.ndarray:
    """(F, L, S) -> (F,) score with ``LEAK <=> score >= threshold`` under ``rule``."""
    seg_probs = np.asarray(seg_probs)
    long_probs = long_segment_probs(seg_probs)                       # (F, L)
    if rule == "long_vote":
        return kth_largest(long_probs, min_votes(long_probs.shape[1], vote_fraction))
    if rule == "frac_vote":
        flat = seg_probs.reshape(seg_probs.shape[0], -1)             # (F, L * S)
        return kth_largest(flat, min_votes(flat.shape[1], vote_fraction))
    if rule == "mean":
        return seg_probs.reshape(seg_probs.shape[0], -1).mean(axis=-1)
    if rule == "any_long":
        return long_probs.max(axis=-1)
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def file_decisions(seg_probs: np.ndarray, thresholds: np.ndarray | float, rule: Rule,
                   vote_fraction: float = 0.5) -> np.ndarray:
    """(F, L, S) and K thresholds -> (K, F) boolean LEAK decisions, all thresholds at once."""
    scores = file_scores(seg_probs, rule, vote_fraction)             # (F,)
    return decide(scores, thresholds)


def decide(scores: np.ndarray, thresholds: np.ndarray | float) -> np.ndarray:
    """(N,) scores, K thresholds -> (K, N) booleans ``score >= threshold`` (ties are LEAK)."""
    grid = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))  # (K,)
    return np.asarray(scores)[None, :] >= grid[:, None]


def threshold_grid(lo: float, hi: float, step: float) -> np.ndarray:
    """lo, lo + step, ..., hi (inclusive when hi is on the grid), rounded to GRID_DECIMALS."""
    n = int(np.floor((hi - lo) / step + 1e-9)) + 1
    return np.round(lo + step * np.arange(n), GRID_DECIMALS)
