"""The middle of explain's summary line: what moved a call, in words."""

from __future__ import annotations

from typing import Any

from leakpipe.constants import DECISION_NAMES
from leakpipe.explain.recording import Explanation


def top_band_group(ex: Explanation) -> str:
    """The band group that most pushed a CNN's call the way it went."""
    side = ex.towards_leak if ex.decision == DECISION_NAMES[1] else ex.towards_noleak
    if not side:
        return "no band group pushed it that way"
    g = side[0]
    return f"most from {ex.groups[g].label} (leak_prob {ex.leak_prob_without(g):.4f} without it)"


def main_term(ex: Any) -> str:
    """The term of a stacked logit (a part's evidence, or the stacker's intercept) that pushed
    the call most the way it went, signed: what actually moved the score. ``ex`` has ``parts``
    (name -> {"evidence": logit}), ``bias``, ``raw_score`` and ``raw_threshold``."""
    terms = {f"the {name} part": part["evidence"] for name, part in ex.parts.items()}
    terms["the stacker's intercept"] = ex.bias
    leak = ex.raw_score >= ex.raw_threshold
    name = max(terms, key=lambda k: terms[k] if leak else -terms[k])
    others = ", ".join(f"{k} {v:+.2f}" for k, v in terms.items() if k != name)
    return f"most from {name} ({terms[name]:+.2f} to the logit; {others})"


def top_statistic_text(contributions: dict[str, float]) -> str:
    """The statistic that moved a statistics model's logit most (contributions sorted by size,
    as ``explain.stats`` gives them)."""
    name, value = next(iter(contributions.items()))
    return f"most from {name} ({value:+.2f} to the logit)"


__all__ = ["main_term", "top_band_group", "top_statistic_text"]
