"""The set domain check: are many recordings, taken together, farther from the training
recordings than new sites of the training network are? Pure numpy and scipy.

Recordings of one network share its sensors, mounts and loggers, so a shift too small to put
one recording past the per-recording threshold (``leakpipe.decision.domain``) moves all of them
the same way. ``set_check`` compares the distances D of a set of recordings (a predict run,
adapt's field pool, evaluate's test split) with the val recordings' D kept in the reference
(``DomainReference.val_distances``): a one-sided Mann-Whitney rank test (are the set's
distances larger?), ``shifted`` when its p-value is below ``SET_ALPHA``. Val's sites are ones
the reference never saw, as a new network's are, so the test asks whether the set is farther
from training than new sites of the training network are.

Recordings of one site are not independent, which a rank test assumes, so the p-value is not
an exact false-alarm rate for a set of whole sites of the training network
(benchmarks/studies/domain_check.py, ``site_sets``, measures how often whole test sites reach
``SET_ALPHA``: docs/evaluation.md#domain-check). Against V val recordings one recording's
smallest p-value is 1 / (V + 1), so the set check speaks only for sets: a single recording is
the per-recording check's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from scipy.stats import mannwhitneyu

from leakpipe.decision.domain import IN, SHIFTED, UNKNOWN, DomainReference

SET_ALPHA = 1e-3          # p-value under which a set of recordings is shifted (``set_check``)


@dataclass(frozen=True)
class SetCheck:
    """A set of recordings against val: ``in`` / ``shifted`` / ``unknown`` and the numbers."""

    domain: str
    n: int                    # recordings with a distance in the set
    median: float             # their median D (NaN for none)
    val_median: float         # the val recordings' median D (NaN: not kept)
    p_value: float            # one-sided Mann-Whitney: the set's D larger than val's (NaN: none)
    alpha: float = SET_ALPHA  # shifted when p_value is below it

    def line(self) -> str:
        """One plain sentence for logs and summaries."""
        if self.domain == UNKNOWN:
            return (f"set domain check: unknown ({self.n} recordings with a distance; the "
                    "detector keeps no val distances)" if self.n else
                    "set domain check: unknown (no recording with a distance)")
        return (f"set domain check: {self.domain} (median D {self.median:.3f} over {self.n} "
                f"recordings vs val {self.val_median:.3f}; rank test p = {self.p_value:.2g}, "
                f"shifted below {self.alpha:g})")

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "n": self.n, "median_distance": _finite(self.median),
                "val_median_distance": _finite(self.val_median),
                "p_value": _finite(self.p_value), "alpha": self.alpha}


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


class SetReference(Protocol):
    """What the set check compares a set with: the distances D of recordings at sites the
    reference's statistics never saw (a CNN's ``DomainReference``: val's; a logger_stats
    detector's ``ValDistances``: its fitted recordings', each site's from the others')."""

    @property
    def val_distances(self) -> np.ndarray: ...


@dataclass(frozen=True)
class ValDistances:
    """A ``SetReference`` of distances alone."""

    val_distances: np.ndarray        # (V,) sorted D


def set_check(ref: SetReference | DomainReference | None, set_distances: np.ndarray,
              alpha: float = SET_ALPHA) -> SetCheck:
    """Are the recordings with D ``set_distances`` (NaN = unknown, dropped), taken together,
    farther from the training recordings than the val recordings are? One-sided Mann-Whitney U
    test of the set's D against the reference's ``val_distances``; ``unknown`` without a
    reference, without val distances or without a recording."""
    d = np.asarray(set_distances, dtype=np.float64).ravel()
    d = d[np.isfinite(d)]
    median = float(np.median(d)) if d.size else math.nan
    if ref is None or ref.val_distances.size == 0 or d.size == 0:
        return SetCheck(UNKNOWN, int(d.size), median, math.nan, math.nan, alpha)
    p = float(mannwhitneyu(d, ref.val_distances, alternative="greater").pvalue)
    return SetCheck(SHIFTED if p < alpha else IN, int(d.size), median,
                    float(np.median(ref.val_distances)), p, alpha)


def min_set_size(n_val: int, alpha: float = SET_ALPHA) -> int:
    """The fewest recordings whose rank test against ``n_val`` val distances can reach
    p < ``alpha`` at all: with every one of n recordings farther than every val one, the exact
    one-sided p-value is 1 / C(n + n_val, n); below this size a set can never be called
    shifted, so its answer says nothing (one recording against 252 val ones: p >= 1/253)."""
    n, p = 1, 1.0 / (n_val + 1)
    while p >= alpha:
        n += 1
        p *= n / (n_val + n)
    return n


__all__ = ["SET_ALPHA", "SetCheck", "SetReference", "ValDistances", "min_set_size",
           "set_check"]
