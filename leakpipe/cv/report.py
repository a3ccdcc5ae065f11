"""Pooled out-of-fold figures with site-bootstrap intervals, per-fold values, the paired
difference, the detector selection, and the out-of-fold tables. Pure functions of the fold
results. Figures come at two levels: per recording (what a utility acts on: one verdict per
logger recording) and per clip (secondary, named ``clip_*``).

Every clip is scored once, by the fold model that never saw its site, under the threshold that
fold chose on its own val; the pooled figures are computed over all of them together. Sites are
what differ between a utility's network and the training data, so the interval resamples
sites: a site drawn k times brings all of its clips k times (clips and recordings of one site
share its pipe, sensor and background, so they are not independent). The paired difference
scores two methods on the same site draws, which is what says whether one is ahead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe.config.crossval import CNN_METHOD, FUSED_METHOD
from leakpipe.cv.recording_level import select_method
from leakpipe.evaluate.bootstrap import (
    RESAMPLES_PER_PASS,
    percentile_interval,
    recording_weights,
    weighted_counts,
    weighted_ranking,
)

FIGURES = ("roc_auc", "f1", "balanced_accuracy", "sensitivity", "specificity", "pr_auc")
PAIRED_FIGURES = ("roc_auc", "f1", "balanced_accuracy")
NESTED = "selected_nested"   # the pseudo-method of the nested selection estimate


@dataclass(frozen=True)
class OutOfFold:
    """Every test clip of every fold, in fold then file order, and each method's output."""

    fold: np.ndarray                  # (N,) int
    recording_id: np.ndarray          # (N,) str
    group: np.ndarray                 # (N,) str
    clip: np.ndarray                  # (N,) int
    truth: np.ndarray                 # (N,) bool
    scores: dict[str, np.ndarray]     # method -> (N,) float
    decision: dict[str, np.ndarray]   # method -> (N,) bool

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.scores)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full(np.shape(num), np.nan), where=np.asarray(den) > 0)


def figures(truth: np.ndarray, decision: np.ndarray, scores: np.ndarray,
            weights: np.ndarray) -> dict[str, np.ndarray]:
    """Every figure per weight row: (N,), (N,), (N,), (B, N) -> name -> (B,)."""
    c = weighted_counts(truth, decision, weights)
    sensitivity = _ratio(c.tp, c.tp + c.fn)
    specificity = _ratio(c.tn, c.tn + c.fp)
    roc, ap = weighted_ranking(scores, truth, weights)
    return {"roc_auc": roc, "f1": _ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn),
            "balanced_accuracy": (sensitivity + specificity) / 2.0,
            "sensitivity": sensitivity, "specificity": specificity, "pr_auc": ap}


def point_figures(truth: np.ndarray, decision: np.ndarray,
                  scores: np.ndarray) -> dict[str, float]:
    """The figures of one set of clips (unit weights)."""
    out = figures(truth, decision, scores, np.ones((1, len(truth))))
    return {k: float(v[0]) for k, v in out.items()}


def site_bootstrap(oof: OutOfFold, resamples: int, confidence: float, seed: int,
                   paired_with: str | None) -> dict[str, Any]:
    """Percentile intervals per method and figure, and of CNN minus ``paired_with``."""
    rng = np.random.default_rng(seed)
    draws: dict[str, dict[str, list[np.ndarray]]] = {m: {} for m in oof.methods}
    diffs: dict[str, list[np.ndarray]] = {}
    for start in range(0, resamples, RESAMPLES_PER_PASS):
        w = recording_weights(oof.group, min(RESAMPLES_PER_PASS, resamples - start), rng)
        per = {m: figures(oof.truth, oof.decision[m], oof.scores[m], w) for m in oof.methods}
        for m, values in per.items():
            for name, v in values.items():
                draws[m].setdefault(name, []).append(v)
        if paired_with is not None:
            for name in PAIRED_FIGURES:
                diffs.setdefault(name, []).append(per[CNN_METHOD][name] - per[paired_with][name])
    intervals = {m: {name: percentile_interval(np.concatenate(v), confidence)
                     for name, v in values.items()} for m, values in draws.items()}
    paired = {name: percentile_interval(np.concatenate(v), confidence)
              for name, v in diffs.items()}
    return {"methods": intervals, "paired": paired}


def fold_figures(oof: OutOfFold, method: str) -> list[dict[str, float]]:
    """The figures of each fold's test clips alone (NaN where a fold lacks a class)."""
    out = []
    for f in np.unique(oof.fold):
        rows = oof.fold == f
        out.append(point_figures(oof.truth[rows], oof.decision[method][rows],
                                 oof.scores[method][rows]))
    return out


def best_baseline(pooled: Mapping[str, Mapping[str, float]]) -> str | None:
    """The baseline with the highest pooled ROC-AUC (the CNN's strongest rival; fused holds
    the CNN, and the nested selection's picks may be the CNN or fused, so neither is a rival)."""
    rivals = {m: f["roc_auc"] for m, f in pooled.items()
              if m not in (CNN_METHOD, FUSED_METHOD, NESTED) and np.isfinite(f["roc_auc"])}
    return max(rivals, key=lambda m: (rivals[m], m)) if rivals else None


def figure_key(level: str, name: str) -> str:
    """``("recording", "f1")`` -> ``recording_f1``; ``("clip", "roc_auc")`` ->
    ``clip_roc_auc``. (cv.json before recording verdicts named the clip figures ``roc_auc``,
    ``file_f1``, ...: a "file" was a clip.)"""
    return f"{level}_{name}"


def _entry(value: float, interval: Any, per_fold: Sequence[float]) -> dict[str, Any]:
    out = {"mean": value, "ci_low": interval.low if interval is not None else float("nan"),
           "ci_high": interval.high if interval is not None else float("nan")}
    return {**out, "folds": list(per_fold)} if per_fold else out


def level_figures(oof: OutOfFold, level: str, *, resamples: int, confidence: float,
                  seed: int) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """Per method ``<level>_<figure>`` entries, and the paired CNN-minus-best-baseline block."""
    pooled = {m: point_figures(oof.truth, oof.decision[m], oof.scores[m]) for m in oof.methods}
    rival = best_baseline(pooled) if CNN_METHOD in oof.methods else None
    boot = site_bootstrap(oof, resamples, confidence, seed, rival)
    methods = {}
    for m in oof.methods:
        per_fold = fold_figures(oof, m)
        methods[m] = {figure_key(level, name): _entry(pooled[m][name],
                                                      boot["methods"][m].get(name),
                                                      [f[name] for f in per_fold])
                      for name in FIGURES}
    if rival is None:
        return methods, None
    return methods, {"minus": rival, **{
        figure_key(level, name): _entry(pooled[CNN_METHOD][name] - pooled[rival][name],
                                        boot["paired"].get(name), [])
        for name in PAIRED_FIGURES}}


def with_nested(recordings: OutOfFold, choices: Sequence[str | None]) -> OutOfFold:
    """The recordings table plus the pseudo-method ``NESTED``: each fold's test recordings
    scored by the method chosen on that fold's inner val."""
    if any(c is None for c in choices):
        return recordings
    pick = np.asarray(choices, dtype=object)[recordings.fold]
    scores = np.array([recordings.scores[m][i] for i, m in enumerate(pick)], dtype=np.float64)
    decision = np.array([recordings.decision[m][i] for i, m in enumerate(pick)], dtype=bool)
    return dataclasses.replace(recordings, scores={**recordings.scores, NESTED: scores},
                               decision={**recordings.decision, NESTED: decision})


def summarise(clips: OutOfFold, recordings: OutOfFold, *, resamples: int, confidence: float,
              seed: int, margin: float = 0.0,
              nested: Sequence[str | None] = ()) -> dict[str, Any]:
    """metrics/cv.json: per method the recording figures first (``recording_roc_auc``,
    ``recording_f1``, ``recording_balanced_accuracy``, ...), then the clip figures
    (``clip_*``), each ``mean`` (pooled out-of-fold value), ``ci_low`` / ``ci_high`` (site
    bootstrap), ``folds`` (per fold); the paired CNN-minus-best-baseline difference (recording
    level); ``selected`` (the detector kind grouped CV picks) and ``selected_nested``; the
    counts the figures rest on."""
    table = with_nested(recordings, nested) if nested else recordings
    by_recording, paired = level_figures(table, "recording", resamples=resamples,
                                         confidence=confidence, seed=seed)
    by_clip, _ = level_figures(clips, "clip", resamples=resamples, confidence=confidence,
                               seed=seed)
    nested_figures = by_recording.pop(NESTED, None)
    methods = {m: {**by_recording[m], **by_clip[m]} for m in clips.methods}
    auc = {m: methods[m]["recording_roc_auc"]["mean"] for m in methods}
    out: dict[str, Any] = {
        "folds": int(len(np.unique(clips.fold))), "sites": int(len(np.unique(clips.group))),
        "recordings": int(len(recordings.truth)),
        "leak_recordings": int(recordings.truth.sum()), "clips": int(len(clips.truth)),
        "leak_clips": int(clips.truth.sum()), "confidence": confidence,
        "bootstrap_resamples": resamples, "selected": select_method(auc, margin),
        "selection_margin": margin, "methods": methods}
    if nested_figures is not None:
        out["selected_nested"] = {"per_fold": list(nested), **{
            k: v for k, v in nested_figures.items() if k.startswith("recording_")}}
    if paired is not None:
        out["paired"] = paired
    return out


def oof_rows(oof: OutOfFold) -> list[dict[str, Any]]:
    """The out-of-fold predictions table: a row per test clip, a score and decision per method."""
    rows = []
    for i in range(len(oof.truth)):
        row: dict[str, Any] = {"fold": int(oof.fold[i]) + 1, "recording_id": oof.recording_id[i],
                               "clip": int(oof.clip[i]), "group": oof.group[i],
                               "leak": int(oof.truth[i])}
        for m in oof.methods:
            row[f"{m}_score"] = f"{oof.scores[m][i]:.6g}"
            row[f"{m}_leak"] = int(oof.decision[m][i])
        rows.append(row)
    return rows


def recording_rows(oof: OutOfFold) -> list[dict[str, Any]]:
    """The out-of-fold recording verdicts: a row per test recording, a score and decision per
    method."""
    rows = []
    for i in range(len(oof.truth)):
        row: dict[str, Any] = {"fold": int(oof.fold[i]) + 1, "recording_id": oof.recording_id[i],
                               "group": oof.group[i], "leak": int(oof.truth[i])}
        for m in oof.methods:
            row[f"{m}_score"] = f"{oof.scores[m][i]:.6g}"
            row[f"{m}_leak"] = int(oof.decision[m][i])
        rows.append(row)
    return rows


def fold_records(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The DVC plot rows: one per fold and method with its recording and clip ROC-AUC, and
    ``selected`` (``yes`` on the rows of the kind the selection picked: the chart marks it)."""
    rows = []
    chosen = str(summary.get("selected", ""))
    for m, figs in summary["methods"].items():
        for f, (auc, f1, clip_auc) in enumerate(zip(
                figs["recording_roc_auc"]["folds"], figs["recording_f1"]["folds"],
                figs["clip_roc_auc"]["folds"], strict=True)):
            rows.append({"fold": f + 1, "method": m, "recording_roc_auc": auc,
                         "recording_f1": f1, "clip_roc_auc": clip_auc,
                         "selected": "yes" if m == chosen else "no"})
    return rows


def summary_line(summary: Mapping[str, Any], path: Path) -> str:
    """The stage's one printed line: every method's recording ROC-AUC, the paired figures, the
    selection."""
    key = "recording_roc_auc"
    repeats = int(summary.get("repeats", 1))
    pre = "draws_" if repeats > 1 else ""          # several draws: their mean and its interval
    parts = [f"{m} {f[key][pre + 'mean']:.3f} ({f[key][pre + 'ci_low']:.2f}-"
             f"{f[key][pre + 'ci_high']:.2f})" for m, f in summary["methods"].items()]
    text = (f"crossval: {summary['folds']} folds"
            + (f" x {repeats} draws (their mean)" if repeats > 1 else "")
            + f", {summary['sites']} sites, {summary['recordings']} recordings, recording "
            f"ROC-AUC: {'; '.join(parts)}")
    versus = summary.get("paired_vs_rule")
    if versus and summary["selected"] in versus["methods"]:
        d = versus["methods"][summary["selected"]]
        text += (f"; {summary['selected']} - {versus['rule']} {d['mean']:+.3f} "
                 f"({d['ci_low']:+.2f} to {d['ci_high']:+.2f})")
    if "paired" in summary:
        d = summary["paired"][key]
        text += (f"; cnn - {summary['paired']['minus']} {d['mean']:+.3f} "
                 f"({d['ci_low']:+.2f} to {d['ci_high']:+.2f})")
    text += f"; selected {summary['selected']}"
    if "selected_nested" in summary:
        d = summary["selected_nested"][key]
        text += (f" (nested estimate {d['mean']:.3f}, {d['ci_low']:.2f}-{d['ci_high']:.2f}; "
                 f"per fold {', '.join(map(str, summary['selected_nested']['per_fold']))})")
    return f"{text} -> {path}"
