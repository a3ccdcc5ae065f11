"""Sections more than one stage reads, each key declared once: `runtime` and `decision`.

Training validates every epoch and evaluate chooses the operating point with the same decision
settings, and every stage that runs the network runs it where `runtime` says; twins of these
keys in `train` and `evaluate` (with different defaults) once let the two disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leakpipe.config.fields import num
from leakpipe.errors import ConfigError

__all__ = ["DecisionConfig", "RuntimeConfig", "check_aux_head"]


@dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
    """`runtime`: where and how the network runs (train, tune, evaluate, predict)."""

    device: Literal["auto", "cpu", "cuda"]
    amp: Literal["auto", "off", "fp16", "bf16"]
    channels_last: bool


@dataclass(frozen=True, kw_only=True)
class DecisionConfig:
    """`decision`: segment outputs -> file decisions, for validation and evaluation alike."""

    prob_mode: Literal["softmax", "aux", "blend"]
    rule: Literal["long_vote", "frac_vote", "mean", "any_long"]
    vote_fraction: float = num(gt=0, le=1)
    segment_threshold: float = num(gt=0, lt=1)
    threshold_min: float = num(gt=0, lt=1)
    threshold_max: float = num(gt=0, lt=1)
    threshold_step: float = num(gt=0, lt=1)

    def problems(self) -> list[tuple[str, str]]:
        if self.threshold_min > self.threshold_max:
            return [("threshold_min", "must not exceed threshold_max")]
        return []


def check_aux_head(decision: DecisionConfig, leak_aux_weight: float, source: str) -> None:
    """`decision.prob_mode: aux` reads the auxiliary leak head, which trains only when
    `train.leak_aux_weight` > 0: a cross-section rule, checked by the `check` stage and train."""
    if decision.prob_mode == "aux" and leak_aux_weight == 0:
        raise ConfigError(f"{source}: decision.prob_mode: 'aux' needs train.leak_aux_weight > 0 "
                          "(the aux head is untrained)")
