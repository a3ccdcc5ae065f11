"""What the adapt stage is given and what every round reads: paths, params, resolved inputs.

``AdaptPaths`` and ``AdaptSections`` are what `leakpipe adapt` passes in (the command line and
params.yaml). ``AdaptInputs`` is everything the stage resolves from them once, before the first
round: the seed detector, the memory plan, the field recordings in features, the runtime and
the scoring batch budget. It is frozen: no round changes it. What does change from round to
round (the rounds done, the stop reason, the MLflow run) is ``leakpipe.adapt.state.AdaptState``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe.adapt.field import FieldSet
from leakpipe.config import (
    AdaptConfig,
    BuildConfig,
    DecisionConfig,
    EvaluateConfig,
    RuntimeConfig,
    TrainConfig,
    load_section,
)
from leakpipe.detector import Detector
from leakpipe.runtime import Runtime


@dataclass(frozen=True)
class AdaptPaths:
    """Every path of the stage; dvc.yaml passes them on the command line."""

    detector: Path        # the seed detector (evaluate's)
    train: Path
    val: Path
    validated: Path | None   # the validation stamp; None: --unvalidated (tagged, warned)
    plan: Path
    work: Path            # round state and checkpoints (resume)
    network: Path         # out: the adapted network
    adapted: Path         # out: the adapted detector
    metrics: Path
    plots: Path           # per-round table (CSV)
    figure: Path          # per-round figure (PNG)


@dataclass(frozen=True)
class AdaptSections:
    adapt: AdaptConfig
    runtime: RuntimeConfig
    train: TrainConfig
    decision: DecisionConfig
    evaluate: EvaluateConfig
    build: BuildConfig

    @classmethod
    def load(cls, params: Path) -> AdaptSections:
        return cls(**{f.name: load_section(params, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class AdaptInputs:
    """What every round reads, resolved once by the stage."""

    paths: AdaptPaths
    cfgs: AdaptSections
    runtime: Runtime
    plan: Mapping[str, Any]           # the preload stage's memory plan
    seed: Detector                    # round 0's detector: what every round is guarded against
    pool: FieldSet                    # the unlabelled recordings
    check: FieldSet | None            # the labelled field check set (None: none given)
    truth: Mapping[str, int] | None   # the pool's hidden truth, only to report label accuracy
    budget: int                       # segments per forward pass when scoring field recordings
    progress: bool                    # progress bars of the fine-tune
