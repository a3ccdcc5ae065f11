"""What the adapt stage is given: ``AdaptPaths`` (the command line) and ``AdaptSections``
(params.yaml). What a kind resolves from them once, before the first round, lives in its
adapter (``leakpipe.adapt.adapter``); what changes from round to round (the rounds done, the
stop reason, the MLflow run) is ``leakpipe.adapt.state.AdaptState``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from leakpipe.config import (
    AdaptConfig,
    BaselinesConfig,
    BuildConfig,
    DecisionConfig,
    DetectorConfig,
    EvaluateConfig,
    RuntimeConfig,
    TrainConfig,
    load_section,
)


@dataclass(frozen=True)
class AdaptPaths:
    """Every path of the stage; dvc.yaml passes them on the command line."""

    detector: Path        # the seed detector (evaluate's)
    train: Path
    val: Path
    validated: Path | None   # the validation stamp; None: --unvalidated (tagged, warned)
    plan: Path
    work: Path            # round state and checkpoints (resume)
    network: Path         # out: the adapted network (kinds with one)
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
    baselines: BaselinesConfig    # logger_stats: the refit's strengths and statistics
    detector: DetectorConfig      # fused: the stacker's strength

    @classmethod
    def load(cls, params: Path) -> AdaptSections:
        return cls(**{f.name: load_section(params, f.name) for f in dataclasses.fields(cls)})
