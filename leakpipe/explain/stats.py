"""Explaining a `logger_stats` detector's call: which statistics moved the score.

The model is linear in the standardised statistics, so the explanation is exact, not an
approximation: the logit is the bias plus, per statistic, coefficient x standardised value
(``StatsDetector.contributions``). A positive contribution pushed the recording towards LEAK
(e.g. a quiet moment louder than the training recordings': a source that never goes quiet), a
negative one away from it. The figure shows the largest contributions either way beside the
recording's value and the training mean.

The call is given as predict's row gives it (``call``: the verdict, the model's ``decision``,
``leak_prob`` and ``threshold`` on one calibrated scale, the statistics' domain check and the
notes); ``raw_score`` and ``raw_threshold`` are the model's probability and the threshold the
call is taken on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from leakpipe.decision.verdict import call_fields, with_verdict
from leakpipe.explain.figure import title
from leakpipe.features.recording_stats import stat_names
from leakpipe.predict.inputs import Unusable
from leakpipe.predict.rows import STATUS_OK
from leakpipe.predict.stats import stats_domain_fields
from leakpipe.stats_detector import StatsDetector, measure

SHOWN = 12   # contributions drawn in the figure (the JSON holds all)
LABEL_ROOM = 2.2   # x limits in units of the longest bar: its label fits beyond its end


@dataclass(frozen=True)
class StatsExplanation:
    path: Path
    raw_score: float                # the net's P(LEAK), compared with raw_threshold
    raw_threshold: float
    call: dict[str, Any]            # verdict, decision, leak_prob, threshold, domain, notes
    bias: float
    contributions: dict[str, float]  # name -> coefficient x standardised value, largest |.| first
    values: dict[str, float]         # the recording's statistics (NaN: missing band)
    train_mean: dict[str, float]


def explain_stats_recording(path: Path, detector: StatsDetector) -> StatsExplanation:
    from leakpipe.audio.opening import open_audio

    measured = measure(open_audio(path), detector)
    if measured.stats is None:          # predict's words for the same refusal
        raise Unusable(f"{path}: {'; '.join(measured.problems)} (build.quality.reject: no "
                       "decision)")
    return stats_explanation(path, measured.stats, detector)


def stats_explanation(path: Path, stats: np.ndarray,
                      detector: StatsDetector) -> StatsExplanation:
    """The explanation of a recording's (S_all,) statistics (a fused detector's statistics
    part is explained so too)."""
    score = float(detector.probability(stats[None, :])[0])
    moved = detector.contributions(stats)
    order = sorted(moved, key=lambda k: -abs(moved[k]))
    every = stat_names(detector.stats)
    values = {n: float(stats[every.index(n)]) for n in detector.net.names}
    means = dict(zip(detector.net.names, detector.net.mean.tolist(), strict=True))
    call = {"status": STATUS_OK, **call_fields(score, detector.threshold,
                                               detector.leak_prob(score),
                                               detector.prob_threshold),
            **stats_domain_fields(detector, stats), "notes": ""}
    return StatsExplanation(
        path=Path(path), raw_score=score, raw_threshold=detector.threshold,
        call=with_verdict(call), bias=float(detector.net.linear.bias.detach()[0]),
        contributions={k: moved[k] for k in order}, values=values, train_mean=means)


def call_json(call: dict[str, Any]) -> dict[str, Any]:
    """A call's fields as an explanation's JSON gives them (a blank distance: null)."""
    keys = ("verdict", "decision", "leak_prob", "threshold", "domain", "domain_distance",
            "domain_reason", "notes")
    return {k: None if k == "domain_distance" and call[k] == "" else call[k] for k in keys}


def to_json(ex: StatsExplanation) -> dict[str, Any]:
    return {"path": str(ex.path), "kind": "logger_stats", **call_json(ex.call),
            "raw_score": ex.raw_score, "raw_threshold": ex.raw_threshold,
            "logit_bias": ex.bias,
            "contributions": [{"statistic": k, "contribution": v,
                               "value": _plain(ex.values[k]),
                               "train_mean": ex.train_mean[k]}
                              for k, v in ex.contributions.items()]}


def _plain(value: float) -> float | None:
    return None if not np.isfinite(value) else value


def stats_figure(ex: StatsExplanation) -> Figure:
    """Horizontal bars of the largest contributions (towards LEAK right, red)."""
    import matplotlib

    matplotlib.use("Agg")
    fig = Figure(figsize=(8.0, 0.35 * min(len(ex.contributions), SHOWN) + 1.6),
                 layout="constrained")
    draw_statistics(fig.subplots(), ex)
    head = title(ex.path.name, ex.call, fig.get_figwidth(), 9)
    fig.axes[0].set_title(f"{head}\nred: towards LEAK (raw model probability "
                          f"{ex.raw_score:.4f}, raw threshold {ex.raw_threshold:.4f})",
                          fontsize=9)
    return fig


def draw_statistics(ax: Any, ex: StatsExplanation) -> None:
    """The largest contributions as horizontal bars on ``ax``, each with its value."""
    items = list(ex.contributions.items())[:SHOWN][::-1]
    ax.barh([k for k, _ in items], [v for _, v in items],
            color=["C3" if v > 0 else "C0" for _, v in items])
    for i, (k, v) in enumerate(items):
        value = ex.values[k]
        label = "missing" if not np.isfinite(value) else f"{value:.1f} dB"
        ax.text(v, i, f" {label} (train {ex.train_mean[k]:.1f})", va="center", fontsize=7,
                ha="left" if v >= 0 else "right")
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set(xlabel="contribution to the leak logit (coefficient x standardised value)")
    room_for_labels(ax, [v for _, v in items])


def room_for_labels(ax: Any, values: list[float]) -> None:
    """Symmetric x limits wide enough for the labels written beyond the bars' ends."""
    reach = max([abs(v) for v in values] + [1e-9])
    ax.set_xlim(-LABEL_ROOM * reach, LABEL_ROOM * reach)


__all__ = ["StatsExplanation", "call_json", "draw_statistics", "explain_stats_recording",
           "room_for_labels", "stats_explanation", "stats_figure", "to_json"]
