"""A baseline's operating point: evaluate's choice (its criterion, the `decision` grid) made on
the VAL split's scores, shared by the clip baselines (``comparison``), ``logger_stats`` and
`crossval`'s recording verdicts. A clip or recording score is a "file" of one segment, whose
``mean`` rule is the score itself.
"""

from __future__ import annotations

import numpy as np

from leakpipe.config import DecisionConfig, EvaluateConfig
from leakpipe.decision.select import OperatingPoint, select_operating_point
from leakpipe.decision.voting import threshold_grid

CLIP_RULE = "mean"           # one segment per "file": the rule's score is the file's score


def choose_on_val(scores: np.ndarray, truth: np.ndarray, ev: EvaluateConfig,
                  decision: DecisionConfig) -> OperatingPoint:
    """evaluate's operating-point choice (its criterion, the `decision` grid) for (F,) clip
    scores of the VAL split."""
    return select_operating_point(
        scores[:, None, None], truth,
        threshold_grid(decision.threshold_min, decision.threshold_max, decision.threshold_step),
        rule=CLIP_RULE, vote_fraction=decision.vote_fraction, criterion=ev.criterion,
        target=ev.target)


__all__ = ["CLIP_RULE", "choose_on_val"]
