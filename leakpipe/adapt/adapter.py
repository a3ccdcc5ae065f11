"""What the rounds of `adapt` ask of a detector kind (``Adapter``), and what one gives back.

The rounds themselves (``leakpipe.adapt.steps``) are the same for every kind: score the pool,
pseudo-label it (``leakpipe.adapt.pseudo``), refit, re-choose the operating point on the
labelled val split, guard the round against the seed detector (``leakpipe.adapt.guard``),
accept or reject, record. What differs is how a kind refits and scores, so a kind's
``DetectorKind.adapter`` returns an object with the methods below, built once per stage run
from ``AdaptContext``:

- ``cnn`` (``cnn_adapter``): the network fine-tuned on the train split plus the pool's kept
  long segments, its operating point on val;
- ``logger_stats`` (``stats_adapter``): the statistics' model refitted on the train
  recordings plus the pseudo-labelled pool recordings, its strength and threshold on val;
- ``fused`` (``fused_adapter``): its CNN part fine-tuned and its statistics part refitted on
  the same pseudo-labels, then the stacker refitted on val.

Every kind's guard figure is its val F1 at the operating point chosen there, in the unit the
kind decides (clips for the CNN, recordings for the others): val is never fitted by a round.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from leakpipe.adapt.field import FieldScores
from leakpipe.adapt.inputs import AdaptPaths, AdaptSections
from leakpipe.adapt.pseudo import PoolLabels
from leakpipe.adapt.state import AdaptState
from leakpipe.runtime import Runtime
from leakpipe.tracking import Tracker

DETECTOR_FILE = "detector.pt"     # a round's detector in its round folder


@dataclass(frozen=True)
class AdaptContext:
    """What a kind's adapter is built from (the stage resolved it once)."""

    paths: AdaptPaths
    cfgs: AdaptSections
    runtime: Runtime
    progress: bool


@dataclass(frozen=True)
class Candidate:
    """A round's detector at its operating point, and its val figures there."""

    detector: Any                 # the kind's detector, threshold included
    figures: dict[str, float]     # val figures at ``detector.threshold`` (``f1`` guards)
    rejection: str = ""           # a kind's own reason to reject the round ("" = none)


class Adapter(Protocol):
    """One kind's part of the rounds (module docstring)."""

    unit: str                           # what the val figure counts: "clip" or "recording"
    sections: tuple[str, ...]           # the params sections its rounds depend on
    pool_keys: tuple[str, ...]          # the pool recordings read, in order
    check_keys: tuple[str, ...] | None  # the labelled check set's (None: no check set)
    check_truth: np.ndarray | None      # (R,) 1 = LEAK

    def seed(self) -> Candidate:
        """Round 0: the seed detector, its val figures (its operating point re-chosen on val
        where the kind chooses it there)."""
        ...

    def refit(self, r: int, state: AdaptState, tracker: Tracker) -> Candidate:
        """Round ``r``: refit from the standing round (``state.accepted``, whose pseudo-labels
        and next split the state holds) on train plus the pseudo-labelled pool."""
        ...

    def round_params(self, r: int, state: AdaptState) -> dict[str, Any]:
        """What round ``r`` logs as its MLflow params."""
        ...

    def scores(self, detector: Any, which: str) -> FieldScores:
        """``which`` ("pool" or "check") under ``detector``: the score its call is taken on
        and, per recording, the units pseudo-labels keep (long segments, or the recording)."""
        ...

    def write_next(self, folder: Path, scores: FieldScores, labels: PoolLabels, detector: Any,
                   seed: int) -> dict[str, Any] | None:
        """What the next round trains on, written under ``folder``; its summary for the round's
        entry (None: the kind reads it from the labels in the state)."""
        ...

    def save(self, detector: Any, folder: Path) -> None:
        """The round's detector (``DETECTOR_FILE``, and what the next round starts from)."""
        ...

    def write_final(self, folder: Path) -> None:
        """The standing round's detector (in ``folder``) -> the stage's outputs."""
        ...

    def domain(self) -> dict[str, Any]:
        """The seed's domain check of the pool and the check set."""
        ...

    def describe(self) -> str:
        """The seed in a few words, for the registered version's description."""
        ...


__all__ = ["AdaptContext", "Adapter", "Candidate", "DETECTOR_FILE"]
