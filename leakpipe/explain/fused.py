"""Explaining a `fused` detector's call: what each part moved it by, and which statistics moved
the statistics part.

The stacker is linear in its parts' logits (``decision.stacking``), so the split is exact, not
an approximation: the stacked logit is the stacker's bias plus the CNN's evidence (its weight x
the logit of the mean of the recording's clip scores) plus the statistics' evidence (its weight
x the statistics model's logit). The statistics' logit is in turn the bias of their model plus
each statistic's contribution, given as the logger_stats kind gives them (``explain.stats``).
The recording is decoded once and scored as `leakpipe predict` scores it
(``predict.fused.measure_fused``), so the explained score is the predicted one, and the call is
given as predict's row gives it (``call``: the verdict, the model's ``decision``, ``leak_prob``
and ``threshold`` on one calibrated scale, both parts' domain check, the notes); ``raw_score``
and ``raw_threshold`` are the stacked probability and the threshold the call is taken on.

The CNN part's bands: given the CNN part's band-occlusion explanation of the same recording
(``explain.recording``: each mel band group set to the fill level, every clip re-scored), the
stacked probability is recomputed with each group's occluded CNN part probability and the
statistics unchanged (they are measured from the waveform, which occluding the network's input
does not touch): ``occlusion`` says what each band group moved the call by, through the CNN
part, on the stacked scale the call is taken on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.stacking import sigmoid
from leakpipe.decision.verdict import DECIMALS, call_fields, with_verdict
from leakpipe.explain.figure import title
from leakpipe.explain.occlusion import BandGroup, pushes
from leakpipe.explain.recording import MIN_CHANGE, Explanation
from leakpipe.explain.stats import (
    SHOWN,
    StatsExplanation,
    call_json,
    draw_statistics,
    room_for_labels,
    stats_explanation,
)
from leakpipe.explain.stats import to_json as stats_json
from leakpipe.predict.fused import fused_domain, measure_fused
from leakpipe.predict.rows import STATUS_OK
from leakpipe.predict.scoring import ClipScoring
from leakpipe.stats_detector import FusedDetector


@dataclass(frozen=True)
class FusedExplanation:
    path: Path
    raw_score: float                     # the stacked P(LEAK), compared with raw_threshold
    raw_threshold: float
    call: dict[str, Any]                 # verdict, decision, leak_prob, threshold, domain, notes
    bias: float                          # the stacker's
    parts: dict[str, dict[str, float]]   # part -> probability, logit, weight, evidence
    statistics: StatsExplanation         # the statistics part, statistic by statistic
    long_starts_s: np.ndarray            # (N,) the CNN part's long segments, time order
    long_probs: np.ndarray               # (N,) their leak probabilities
    cnn_threshold: float                 # the CNN's own operating point (for reference)
    bands: FusedBands | None = None      # the CNN part's band groups (None: not explained)


@dataclass(frozen=True)
class FusedBands:
    """The CNN part's band groups, each occluded: the stacked probability without it."""

    groups: list[BandGroup]
    fill: str
    fill_db: float
    cnn_probs_without: np.ndarray        # (G,) the CNN part's recording probability
    scores_without: np.ndarray           # (G,) the stacked P(LEAK), statistics unchanged


def fused_bands(detector: FusedDetector, cnn: Explanation, stats: np.ndarray) -> FusedBands:
    """The stacked probability with each of the CNN explanation's band groups occluded."""
    without = detector.probability(cnn.recording_probs_without,
                                   np.repeat(stats[None, :], len(cnn.groups), axis=0))
    return FusedBands(cnn.groups, cnn.fill, cnn.fill_db, cnn.recording_probs_without, without)


def explain_fused_recording(path: Path, detector: FusedDetector, scoring: ClipScoring,
                            cnn: Callable[[Path], Explanation] | None = None
                            ) -> FusedExplanation:
    """One recording's explanation, with the CNN part's bands when ``cnn`` explains the CNN
    part; an unusable one raises ``Unusable`` as predict refuses it (no call to explain)."""
    measured = measure_fused(path, detector, scoring)     # Unusable: as predict refuses it
    logits = detector.part_logits(measured.cnn_prob, measured.stats[None, :])[0]    # (2,)
    evidence = detector.stacker.terms(logits)                                       # (2,)
    score = float(detector.stacker.prob(logits))
    parts = {name: {"probability": float(sigmoid(z)), "logit": float(z), "weight": float(w),
                    "evidence": float(e)}
             for name, z, w, e in zip(detector.stacker.names, logits, detector.stacker.weights,
                                      evidence, strict=True)}
    call = {"status": STATUS_OK, **call_fields(score, detector.threshold,
                                               detector.leak_prob(score),
                                               detector.prob_threshold),
            **fused_domain(detector, measured), "notes": measured.notes}
    return FusedExplanation(
        path=Path(path), raw_score=score, raw_threshold=detector.threshold,
        call=with_verdict(call), bias=detector.stacker.bias, parts=parts,
        statistics=stats_explanation(path, measured.stats, detector.logger_stats),
        long_starts_s=measured.long_starts_s, long_probs=measured.long_probs,
        cnn_threshold=float(detector.cnn.threshold),
        bands=fused_bands(detector, cnn(path), measured.stats) if cnn is not None else None)


def to_json(ex: FusedExplanation) -> dict[str, Any]:
    """The numbers: the stacked logit is ``stacker_bias`` plus the parts' ``evidence``; the
    statistics part's logit (before clipping) is ``statistics.logit_bias`` plus its
    contributions."""
    stats = stats_json(ex.statistics)
    return {"path": str(ex.path), "kind": "fused", **call_json(ex.call),
            "raw_score": ex.raw_score, "raw_threshold": ex.raw_threshold,
            "stacker_bias": ex.bias,
            "parts": [{"part": name, **values} for name, values in ex.parts.items()],
            "long_segments": {"starts_s": np.round(ex.long_starts_s, DECIMALS).tolist(),
                              "probs": np.round(ex.long_probs, DECIMALS).tolist(),
                              "cnn_threshold": ex.cnn_threshold},
            "statistics": {k: stats[k] for k in ("logit_bias", "contributions")},
            **({"occlusion": bands_json(ex)} if ex.bands is not None else {})}


def bands_json(ex: FusedExplanation) -> dict[str, Any]:
    """The CNN part's band groups: each one's stacked probability without it, the drop."""
    b = ex.bands
    assert b is not None
    drops = ex.raw_score - b.scores_without

    def r(value: float) -> float:
        return round(float(value), DECIMALS)

    up, down = pushes(drops, MIN_CHANGE)
    return {"fill": b.fill, "fill_db": r(b.fill_db), "through": "cnn",
            "towards_leak": up, "towards_noleak": down,
            "groups": [{"group": g, "mel_bands": [band.first, band.last],
                        "hz": [r(band.low_hz), r(band.high_hz)],
                        "cnn_prob_without": r(b.cnn_probs_without[g]),
                        "raw_score_without": r(b.scores_without[g]), "raw_drop": r(drops[g]),
                        "decision_without": DECISION_NAMES[
                            int(b.scores_without[g] >= ex.raw_threshold)]}
                       for g, band in enumerate(b.groups)]}


def fused_figure(ex: FusedExplanation) -> Figure:
    """Above, each part's evidence (towards LEAK right, red); then the CNN part's long-segment
    probabilities over the recording, and (when explained) what each of its band groups moved
    the stacked probability by; below, the statistics part's largest contributions."""
    import matplotlib

    matplotlib.use("Agg")
    rows = min(len(ex.statistics.contributions), SHOWN)
    groups = len(ex.bands.groups) if ex.bands is not None else 0
    fig = Figure(figsize=(8.0, 0.35 * rows + 5.4 + 0.25 * groups), layout="constrained")
    heights = [2, 2, *([max(groups * 0.35, 1.5)] if groups else []), max(rows, 2)]
    axes = fig.subplots(len(heights), 1, height_ratios=heights)
    top, middle, bottom = axes[0], axes[1], axes[-1]
    names = list(ex.parts)[::-1]
    values = [ex.parts[n]["evidence"] for n in names]
    top.barh(names, values, color=["C3" if v > 0 else "C0" for v in values])
    for i, name in enumerate(names):
        top.text(values[i], i, f" P {ex.parts[name]['probability']:.3f} x weight "
                               f"{ex.parts[name]['weight']:.2f}", va="center", fontsize=7,
                 ha="left" if values[i] >= 0 else "right")
    top.axvline(0.0, color="black", linewidth=0.8)
    room_for_labels(top, values)
    top.set(xlabel=f"evidence: weight x the part's logit (stacker bias {ex.bias:+.2f})")
    head = title(ex.path.name, ex.call, fig.get_figwidth(), 9)
    top.set_title(f"{head}\nred: towards LEAK (raw stacked probability {ex.raw_score:.4f}, "
                  f"raw threshold {ex.raw_threshold:.4f})", fontsize=9)
    middle.plot(ex.long_starts_s, ex.long_probs, ".", color="C3", markersize=3)
    middle.axhline(ex.cnn_threshold, color="black", linewidth=0.8, linestyle="--")
    middle.set(ylim=(0.0, 1.0), xlabel="seconds from the recording's start",
               ylabel="leak probability")
    middle.set_title("the CNN part, per long segment (dashed: the CNN's own threshold)",
                     fontsize=9)
    if ex.bands is not None:
        _draw_bands(axes[2], ex)
    draw_statistics(bottom, ex.statistics)
    bottom.set_title("the statistics part: contributions to its logit", fontsize=9)
    return fig


def _draw_bands(ax: Any, ex: FusedExplanation) -> None:
    """One bar per band group: how much occluding it lowers the stacked probability."""
    b = ex.bands
    assert b is not None
    drops = ex.raw_score - b.scores_without
    labels = [f"{g.low_hz:.0f}-{g.high_hz:.0f} Hz" for g in b.groups]
    ax.barh(labels[::-1], drops[::-1], color=["C3" if d > 0 else "C0" for d in drops[::-1]])
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.tick_params(axis="y", labelsize=7)
    ax.set(xlabel="stacked probability minus that with the band group occluded")
    ax.set_title(f"the CNN part's bands (occluded to the recording's {b.fill} level; "
                 "red: they pushed towards LEAK)", fontsize=9)


__all__ = ["FusedBands", "FusedExplanation", "bands_json", "explain_fused_recording",
           "fused_bands", "fused_figure", "to_json"]
