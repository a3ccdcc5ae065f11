"""Repeated draws of the site-to-fold assignment, and each method against the logger's rule.

One assignment of sites to folds is one draw of luck: with a few dozen sites, which sites
share a test fold moves a method's pooled figure by a few hundredths, as much as the methods
differ. ``cv.repeats`` (``leakpipe cv --repeats``) draws the assignment N times (draw d with
seed ``cv.seed + d``, stratified by class as every draw); each draw is a whole grouped CV whose
test folds cover every site exactly once.

``draw_figures`` (pure) gives per method its pooled out-of-fold recording ROC-AUC in each
draw, their mean, and the site-bootstrap interval of that mean: each resample draws sites
with replacement once and weighs every draw's recordings by it (a site drawn k times brings
all of its recordings k times, in every draw), so the interval covers which sites a network
happens to have, and the mean over draws removes most of which sites happen to share a fold.
``paired_vs_rule`` is each method minus the best of the logger's rules (``RULE_METHODS``, the
one with the highest mean) on the same resamples: a method whose interval lies above zero
beats what the loggers already tell their users, one whose interval holds zero does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from leakpipe.config.crossval import RULE_METHODS
from leakpipe.cv.recording_level import select_method
from leakpipe.cv.report import OutOfFold, point_figures
from leakpipe.evaluate.bootstrap import (
    RESAMPLES_PER_PASS,
    percentile_interval,
    recording_draws,
    weighted_ranking,
)

FIGURE = "recording_roc_auc"


def _interval(values: np.ndarray, confidence: float) -> dict[str, float]:
    interval = percentile_interval(values, confidence)
    return {"ci_low": interval.low if interval is not None else float("nan"),
            "ci_high": interval.high if interval is not None else float("nan")}


def resampled_means(tables: Sequence[OutOfFold], methods: Sequence[str], *, resamples: int,
                    seed: int) -> dict[str, np.ndarray]:
    """Per method (B,): the mean over ``tables`` (one per draw, the same recordings) of the
    recording ROC-AUC under each site resample, one resample shared by every draw."""
    sites = np.unique(np.concatenate([np.asarray(t.group).astype(str) for t in tables]))
    where = [np.searchsorted(sites, np.asarray(t.group).astype(str)) for t in tables]
    rng = np.random.default_rng(seed)
    out: dict[str, list[np.ndarray]] = {m: [] for m in methods}
    for start in range(0, resamples, RESAMPLES_PER_PASS):
        counts = recording_draws(len(sites), min(RESAMPLES_PER_PASS, resamples - start),
                                 rng).astype(np.float64)                    # (b, sites)
        for m in methods:
            per_draw = [weighted_ranking(t.scores[m], t.truth, counts[:, idx])[0]
                        for t, idx in zip(tables, where, strict=True)]      # D x (b,)
            out[m].append(np.mean(per_draw, axis=0))
    return {m: np.concatenate(v) for m, v in out.items()}


def best_rule(means: dict[str, float]) -> str | None:
    """The logger's rule with the highest mean recording ROC-AUC (None: no rule was run)."""
    rules = {m: v for m, v in means.items() if m in RULE_METHODS and np.isfinite(v)}
    return max(rules, key=lambda m: (rules[m], m)) if rules else None


def draw_figures(tables: Sequence[OutOfFold], *, resamples: int, confidence: float,
                 seed: int) -> dict[str, Any]:
    """``methods``: per method the draws' recording ROC-AUC, their mean and its interval;
    ``paired_vs_rule``: each method minus the best rule, on shared resamples (module doc)."""
    methods = tables[0].methods
    points = {m: [point_figures(t.truth, t.decision[m], t.scores[m])["roc_auc"]
                  for t in tables] for m in methods}
    means = {m: float(np.mean(v)) for m, v in points.items()}
    boot = resampled_means(tables, methods, resamples=resamples, seed=seed)
    per_method = {m: {"draws": [float(v) for v in points[m]], "draws_mean": means[m],
                      **{f"draws_{k}": v for k, v in _interval(boot[m], confidence).items()}}
                  for m in methods}
    rule = best_rule(means)
    out: dict[str, Any] = {"repeats": len(tables), "methods": per_method}
    if rule is not None:
        out["paired_vs_rule"] = {"rule": rule, "figure": FIGURE, "methods": {
            m: {"mean": means[m] - means[rule], **_interval(boot[m] - boot[rule], confidence)}
            for m in methods if m != rule}}
    return out


def with_draws(summary: dict[str, Any], drawn: dict[str, Any], margin: float) -> dict[str, Any]:
    """cv.json with the draws: ``repeats``, each method's ``recording_roc_auc`` gains
    ``draws``, ``draws_mean`` and its interval, ``paired_vs_rule`` beside ``paired``, and
    ``selected`` is chosen on the draws' means (one draw: the pooled figure itself, so a
    single draw selects as before)."""
    out = {**summary, "repeats": drawn["repeats"]}
    out["methods"] = {m: {**entry, FIGURE: {**entry[FIGURE], **drawn["methods"][m]}}
                      for m, entry in summary["methods"].items()}
    if "paired_vs_rule" in drawn:
        out["paired_vs_rule"] = drawn["paired_vs_rule"]
    out["selected"] = select_method({m: v["draws_mean"] for m, v in drawn["methods"].items()},
                                    margin)
    return out


__all__ = ["FIGURE", "best_rule", "draw_figures", "resampled_means", "with_draws"]
