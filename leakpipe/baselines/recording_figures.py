"""One split's figures per recording (the unit a utility acts on), named ``<split>/recording_*``,
and their site-bootstrap intervals: a site drawn k times brings all of its recordings k times,
as `crossval`'s intervals do. Pure; shared by `baselines` (logger_stats) and `ship` (both
kinds)."""

from __future__ import annotations

import numpy as np

from leakpipe.config import EvaluateConfig
from leakpipe.evaluate.bootstrap import bootstrap_intervals
from leakpipe.evaluate.figures import binary_figures, interval_metrics, prefixed


def recording_figures(split: str, truth: np.ndarray, decision: np.ndarray, scores: np.ndarray,
                      groups: np.ndarray, *, intervals: EvaluateConfig | None = None,
                      counts: bool = False) -> dict[str, float]:
    """(R,) truth, decisions, scores and sites -> ``<split>/recording_<figure>``; with
    ``intervals`` (evaluate's resamples, confidence, seed) their ``_ci_low`` / ``_ci_high``;
    with ``counts`` ``<split>/recordings`` and ``<split>/sites``."""
    out = prefixed(f"{split}/recording", binary_figures(truth, decision, scores))
    if intervals is not None:
        out.update(interval_metrics(f"{split}/recording", bootstrap_intervals(
            truth, decision, scores, groups, resamples=intervals.bootstrap_resamples,
            confidence=intervals.confidence, seed=intervals.seed)))
    if counts:
        out[f"{split}/recordings"] = float(len(truth))
        out[f"{split}/sites"] = float(len(np.unique(groups)))
    return out


__all__ = ["recording_figures"]
