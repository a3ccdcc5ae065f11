"""The score steps of a round: its detector over the field recordings.

- ``score_pool``: the unlabelled pool under the round's detector, its own rule and probability
  mode (as `leakpipe predict` scores a recording): what the pseudo-labels are made from.
- ``check_figures``: the labelled field check set's file figures at the round's operating
  point (``set_figures``: F1, sensitivity, the false-positive rate spelled out, ...); None
  without a check set.
"""

from __future__ import annotations

import numpy as np

from leakpipe.adapt.field import FieldScores, FieldSet, score_detector
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.evaluate.figures import binary_figures
from leakpipe.runtime import Runtime


def score_pool(detector: Detector, pool: FieldSet, runtime: Runtime,
               budget: int) -> FieldScores:
    """Every pool recording's rule score, long-segment and class probabilities."""
    return score_detector(detector, pool, runtime, budget)


def check_figures(detector: Detector, check: FieldSet | None, runtime: Runtime,
                  budget: int) -> dict[str, float] | None:
    """The labelled field check set's figures under ``detector`` (None without a check set)."""
    if check is None:
        return None
    if check.truth is None:
        raise DataError("adapt.check: the field check set has no labels")
    scores = score_detector(detector, check, runtime, budget)
    return set_figures(check.truth, scores.scores, detector.threshold)


def set_figures(truth: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    """File figures of a labelled field set, with the false-positive rate spelled out."""
    figures = binary_figures(truth, scores >= threshold, scores)
    figures["fpr"] = 1.0 - figures["specificity"] if (truth == 0).any() else float("nan")
    return figures
