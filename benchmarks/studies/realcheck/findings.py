"""The sim-to-real summary (a JSON-ready dict) and its figure.

Zero-shot: per recording and overall figures of the synthetic detector. Few-shot: held-out clip
scores pooled over the leave-one-recording-out folds for ``finetune``, ``scratch`` and
``synthetic`` (the detector alone on the same clips), plus every fold's own figures. The clip
scores themselves are kept (``clip_scores``) so the figure can be redrawn from the JSON.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from leakpipe.constants import LEAK_CLASS
from leakpipe.detector import Detector
from realcheck.fewshot import Fold, MethodResult
from realcheck.metrics import (
    DECIMALS,
    ClipTable,
    auc_interval,
    distribution,
    recording_figures,
    table_figures,
)
from realcheck.scoring import RealRecording, Scored

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SYNTHETIC = "synthetic"
PANELS = (SYNTHETIC, "finetune", "scratch")
PANEL_TITLES = {SYNTHETIC: "synthetic detector (zero-shot)",
                "finetune": "fine-tuned (held out)", "scratch": "from scratch (held out)"}
CLASS_COLOURS = {True: "tab:red", False: "tab:blue"}   # LEAK / not
FIGURE_SIZE = (13.0, 4.5)
FIXED_THRESHOLD = 0.5
FIGURES = ("roc_auc", "balanced_accuracy")   # compared between methods
CI_NOTE = ("clips resampled within each class; all clips come from 5 recordings of one "
           "testbed and one sensor, so the interval understates the real uncertainty")


def detector_info(detector: Detector) -> dict[str, Any]:
    voting = detector.voting
    return {"threshold": detector.threshold, "rule": voting.rule, "prob_mode": voting.prob_mode,
            "vote_fraction": voting.vote_fraction, "input_norm": detector.input_norm,
            "binary": detector.binary, "classes": list(detector.class_names),
            "sample_rate": detector.features.sample_rate, "clip_s": detector.features.clip_s}


def zero_shot(detector: Detector, recordings: list[RealRecording], scored: Scored, *,
              resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    """Per recording, overall (ROC-AUC with a clip-bootstrap interval) and per-class spread."""
    table, threshold = scored.table, detector.threshold
    per_recording = {}
    for rec in recordings:
        whole = scored.recording_scores[rec.recording_id]
        per_recording[rec.recording_id] = {
            "label": rec.label, **recording_figures(table.of(rec.recording_id), threshold),
            "recording_score": round(whole, DECIMALS),
            "recording_decision": LEAK_CLASS if whole >= threshold else "not LEAK"}
    low, high = auc_interval(table.truth, table.scores, resamples=resamples,
                             confidence=confidence, seed=seed)
    overall = {"n_clips": int(len(table.scores)), "threshold": threshold,
               **table_figures(table, threshold),
               "roc_auc_ci": [round(low, DECIMALS), round(high, DECIMALS)],
               "ci_confidence": confidence, "ci_resamples": resamples, "ci_note": CI_NOTE}
    return {"per_recording": per_recording, "overall": overall,
            "distribution": class_distributions(table, recordings),
            "clip_scores": clip_scores(table)}


def class_distributions(table: ClipTable, recordings: list[RealRecording]) -> dict[str, Any]:
    """Leak-score quantiles per real class (the folder names)."""
    label_of = {r.recording_id: r.label for r in recordings}
    labels = np.array([label_of[r] for r in table.recording])
    return {name: distribution(table.scores[labels == name]) for name in sorted(set(labels))}


def clip_scores(table: ClipTable) -> dict[str, list[float]]:
    return {str(rec): [round(float(s), DECIMALS) for s in table.of(rec)]
            for rec in dict.fromkeys(table.recording)}


def few_shot(folds: list[Fold], zero: Scored, detector: Detector,
             recordings: list[RealRecording]) -> dict[str, Any]:
    """Pooled held-out figures per method, each fold's own, the leak-vs-background folds and
    whether fine-tuning wins."""
    pooled = {}
    for method in PANELS:
        views = [_view(f, zero, detector, method) for f in folds]
        table = ClipTable.concat([v.table for v in views])
        own = np.concatenate([np.full(len(v.table.scores), v.threshold) for v in views])
        pooled[method] = {**table_figures(table, own),
                          "balanced_accuracy_at_0_5":
                              table_figures(table, FIXED_THRESHOLD)["balanced_accuracy"],
                          "distribution": class_distributions(table, recordings),
                          "clip_scores": clip_scores(table)}
    versus = new_leak_vs_background(folds, zero, detector)
    return {"pooled": pooled, "folds": [fold_figures(f, zero, detector) for f in folds],
            "new_leak_vs_background": versus,
            "beats": {"pooled": _beats(pooled, ""), "new_leak_vs_background":
                      _beats(versus, "mean_")}}


def _view(fold: Fold, zero: Scored, detector: Detector, method: str) -> MethodResult:
    """A fold's result for ``method``; the detector alone is one too (its own threshold)."""
    if method == SYNTHETIC:
        return MethodResult(_subset(zero.table, fold.held_out), detector.threshold,
                            fold.background)
    return fold.methods[method]


def _subset(table: ClipTable, recording: str) -> ClipTable:
    keep = table.recording == recording
    return ClipTable(table.scores[keep], table.truth[keep], table.recording[keep])


def new_leak_vs_background(folds: list[Fold], zero: Scored,
                           detector: Detector) -> dict[str, Any]:
    """Folds holding out a leak: its clips against the unseen val clips of the training
    no-leak recordings, scored by the same fold's model; per fold and the mean."""
    out: dict[str, Any] = {}
    for method in PANELS:
        per_fold = {}
        for fold in folds:
            view = _view(fold, zero, detector, method)
            if view.background is not None:
                table = ClipTable.concat([view.table, view.background])
                per_fold[fold.held_out] = table_figures(table, view.threshold)
        out[method] = {"folds": per_fold, **_mean_figures(per_fold)}
    return out


def _mean_figures(per_fold: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Mean ROC-AUC and balanced accuracy over folds (undefined folds left out)."""
    out = {}
    for name in FIGURES:
        values = [f[name] for f in per_fold.values() if f[name] is not None]
        out[f"mean_{name}"] = round(float(np.mean(values)), DECIMALS) if values else None
    return out


def fold_figures(fold: Fold, zero: Scored, detector: Detector) -> dict[str, Any]:
    """The held-out recording under each method: its scores and the share decided right."""
    out: dict[str, Any] = {"held_out": fold.held_out, "label": fold.label,
                           "train_recordings": list(fold.train_recordings),
                           "val_has_both_classes": fold.val_has_both_classes}
    leak = fold.label == LEAK_CLASS
    for method in PANELS:
        view = _view(fold, zero, detector, method)
        figures = recording_figures(view.table.scores, view.threshold)
        called = figures["share_called_leak"]
        out[method] = {"threshold": view.threshold, **figures,
                       "share_correct": called if leak else round(1.0 - called, DECIMALS),
                       **view.fit}
    return out


def over_seeds(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The leak-vs-background figures of several training seeds (``few_shot`` summaries by
    seed): per method the mean, min and max over seeds of each fold-mean figure, and on how
    many seeds fine-tuning beat each other method. With a dozen clips per fold one seed can
    flip a comparison; the spread says how far a single run can be trusted."""
    out: dict[str, Any] = {"seeds": sorted(per_seed)}
    for method in PANELS:
        out[method] = {}
        for name in FIGURES:
            values = [s["new_leak_vs_background"][method][f"mean_{name}"]
                      for _, s in sorted(per_seed.items())]
            known = [v for v in values if v is not None]
            out[method][name] = {"values": values,
                                 "mean": round(float(np.mean(known)), DECIMALS) if known else None,
                                 "min": min(known) if known else None,
                                 "max": max(known) if known else None}
    out["finetune_wins"] = {
        f"vs_{other}": {name: sum(bool(s["beats"]["new_leak_vs_background"]
                                       [f"finetune_vs_{other}"][name])
                                  for s in per_seed.values())
                        for name in FIGURES}
        for other in ("scratch", SYNTHETIC)}
    return out


def _beats(figures: dict[str, dict[str, Any]], prefix: str) -> dict[str, dict[str, bool | None]]:
    """finetune > other on each figure (None when a figure is undefined)."""
    out = {}
    for other in ("scratch", SYNTHETIC):
        pairs = {name: (figures["finetune"][prefix + name], figures[other][prefix + name])
                 for name in FIGURES}
        out[f"finetune_vs_{other}"] = {name: None if None in pair else pair[0] > pair[1]
                                       for name, pair in pairs.items()}
    return out


def figure(summary: dict[str, Any]) -> Figure:
    """Leak score of every clip per recording: zero-shot, then each held-out method."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGURE_SIZE, layout="constrained")
    axes = fig.subplots(1, len(PANELS), sharey=True)
    zero = summary["zero_shot"]
    labels = {rec: v["label"] for rec, v in zero["per_recording"].items()}
    few = summary.get("few_shot")
    for ax, method in zip(axes, PANELS, strict=True):
        if method == SYNTHETIC:
            scores, figures = zero["clip_scores"], zero["overall"]
            thresholds = dict.fromkeys(scores, zero["overall"]["threshold"])
        elif few is not None:
            scores, figures = few["pooled"][method]["clip_scores"], few["pooled"][method]
            thresholds = {f["held_out"]: f[method]["threshold"] for f in few["folds"]}
        else:
            ax.set_axis_off()
            continue
        _strip(ax, scores, labels, thresholds)
        ax.set_title(f"{PANEL_TITLES[method]}\nROC-AUC {_fmt(figures['roc_auc'])}, "
                     f"bal. acc. {_fmt(figures['balanced_accuracy'])}", fontsize=9)
    axes[0].set_ylabel("clip leak score (rule score)")
    fig.suptitle("real-dev: leak score per 3 s clip; dashes = threshold", fontsize=10)
    return fig


def _strip(ax: Any, scores: dict[str, list[float]], labels: dict[str, str],
           thresholds: dict[str, float]) -> None:
    names = sorted(scores, key=lambda r: (labels[r] == LEAK_CLASS, r))
    rng = np.random.default_rng(0)
    for i, rec in enumerate(names):
        values = np.asarray(scores[rec])
        leak = labels[rec] == LEAK_CLASS
        ax.boxplot(values, positions=[i], widths=0.5, showfliers=False)
        ax.scatter(i + rng.uniform(-0.15, 0.15, values.size), values, s=12, alpha=0.7,
                   color=CLASS_COLOURS[leak])
        ax.hlines(thresholds[rec], i - 0.35, i + 0.35, colors="k", linestyles="dashed")
    ax.set_xticks(range(len(names)), [_short(r, labels[r]) for r in names], rotation=30,
                  ha="right", fontsize=8)
    ax.set_ylim(-0.02, 1.02)


def _short(recording: str, label: str) -> str:
    return f"{PurePosixPath(recording).stem.removeprefix('testbed-')}\n({label})"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
