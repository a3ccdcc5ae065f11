"""The scoring rules of a predict run: batch caps and memory margins, the shortest usable
recording and build's signal checks, and the segments per forward pass they allow.

A detector file written by evaluate holds its own rules, so a recording is scored as the test
split was; for a file older than that, the rules come from params.yaml (``scoring_rules``).
`leakpipe predict`, the served detector, explain, adapt and the sim-to-real check all take
their rules from here.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.config import QualityConfig, load_section
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.runtime import Runtime
from leakpipe.scoring.batching import BatchLimits, batch_segments

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoringRules:
    """Batch caps, memory margins, the shortest usable recording and the signal checks of a
    predict run."""

    limits: BatchLimits
    min_clip_fraction: float
    quality: QualityConfig = DEAD_ONLY    # build.quality; by default the dead check only


def scoring_rules(detector: Detector, params: Path) -> ScoringRules:
    """The detector's own rules (evaluate stores them); for detector files older than that,
    the `evaluate`, `preload` and `build` sections of ``params``."""
    if detector.batch_limits is not None and detector.min_clip_fraction is not None:
        limits, fraction = detector.batch_limits, detector.min_clip_fraction
    else:
        limits, fraction = _params_rules(params)
    quality = detector.quality if detector.quality is not None else params_quality(params)
    return ScoringRules(limits, fraction, quality)


def _params_rules(params: Path) -> tuple[BatchLimits, float]:
    if not Path(params).is_file():
        raise DataError(f"{params}: no such params file, and the detector (written before "
                        "detectors held their scoring rules) has none; re-run evaluate")
    ev, pre = load_section(params, "evaluate"), load_section(params, "preload")
    return (BatchLimits(max_segments=ev.max_batch_segments,
                        cpu_max_segments=ev.cpu_max_batch_segments, safety=pre.safety,
                        host_reserve_mb=pre.host_reserve_mb,
                        device_reserve_mb=pre.device_reserve_mb),
            load_section(params, "build").min_clip_fraction)


def params_quality(params: Path) -> QualityConfig:
    """`build.quality` of ``params`` for a detector file older than the checks (version 7);
    without the file, the checks that need no threshold, with a WARNING."""
    if Path(params).is_file():
        return load_section(params, "build").quality
    log.warning("%s: no such params file, and the detector (written before detectors held "
                "build.quality) has no signal checks: only dead recordings are refused, none is "
                "flagged clipped or DC; re-run evaluate", params)
    return DEAD_ONLY


def batch_budget(detector: Detector, rules: ScoringRules, runtime: Runtime,
                 max_batch_segments: int | None = None) -> int:
    """Segments per forward pass: the rules' cap (or ``max_batch_segments``), sized from free
    memory on the runtime's device."""
    limits = rules.limits
    if max_batch_segments:
        limits = dataclasses.replace(limits, max_segments=max_batch_segments,
                                     cpu_max_segments=max_batch_segments)
    return batch_segments(detector.model_cfg, detector.features.segment_shape[2:],
                          runtime.device, limits)


__all__ = ["ScoringRules", "batch_budget", "params_quality", "scoring_rules"]
