"""The model card of a `logger_stats` detector, and the recording-figures table every shipped
detector's card carries.

A `logger_stats` detector reads no audio features but the whole recording's level statistics,
so its card says what a CNN's cannot: the statistics' settings (frame, percentiles, octave
bands), which statistics the model uses and how much each weighs (the largest coefficients, per
training standard deviation), the operating point, the val and test figures per recording (the
unit it decides) and what its domain check measures and how often it flagged new sites. As the
CNN's card (``leakpipe.evaluate.model_card``) it is built from the evaluation alone (no clock,
no host, no run id), so the same data and code give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from leakpipe.decision.stats_domain import MIN_MISSING_SHARE, Z_LIMIT
from leakpipe.evaluate.model_card import intended_use
from leakpipe.evaluate.registration import SHA_CHARS, figure_text
from leakpipe.features.recording_stats import stat_names
from leakpipe.stats_detector import StatsDetector

TOP_COEFFICIENTS = 8       # statistics listed with their coefficient, the largest first
RECORDING_FIGURES = (("F1", "recording_f1"), ("sensitivity", "recording_recall"),
                     ("specificity", "recording_specificity"),
                     ("precision", "recording_precision"), ("ROC-AUC", "recording_roc_auc"))


@dataclass(frozen=True)
class StatsCardInputs:
    """What the card says, gathered by the ship stage."""

    detector: StatsDetector
    metrics: Mapping[str, float]      # val/recording_*, test/recording_* (+ _ci_*), eval/*
    criterion: str                    # evaluate.criterion: how the threshold was chosen
    confidence: float
    detector_sha: str
    split_sha: Mapping[str, str]      # split -> its file's sha256 (those known)
    source: str                       # build.source, as params.yaml names it
    domain: Mapping[str, float]       # domain_reference.stats_domain_figures of val and test
    per_condition: str = ""           # model_card.per_condition_section of the test recordings


def stats_model_card(card: StatsCardInputs) -> str:
    """The card as Markdown (the registered version's description and a DVC output)."""
    parts = [_head(card), intended_use(), _model(card), _data(card),
             recording_figures_section(card.metrics, card.confidence, ("val", "test")),
             card.per_condition, _domain(card), _limits(card)]
    parts = [p for p in parts if p]
    return "\n\n".join(p.rstrip() for p in parts) + "\n"


def recording_figures_section(metrics: Mapping[str, float], confidence: float,
                              splits: tuple[str, ...]) -> str:
    """``## Figures per recording``: a column per split of ``metrics``' ``<split>/recording_*``
    (with its interval where there is one)."""
    head = "| figure | " + " | ".join(splits) + " |"
    rows = [head, "|---|" + "---|" * len(splits)]
    rows += [f"| {label} | " + " | ".join(figure_text(metrics, f"{s}/{key}") for s in splits)
             + " |" for label, key in RECORDING_FIGURES]
    counts = ", ".join(f"{s}: {_count(metrics, f'{s}/recordings')} recordings at "
                       f"{_count(metrics, f'{s}/sites')} sites" for s in splits)
    return ("## Figures per recording\n\n"
            f"One verdict per recording at the shipped operating point ({counts}); "
            f"{confidence:.0%} intervals resampling sites where shown.\n\n" + "\n".join(rows))


def _head(card: StatsCardInputs) -> str:
    return (f"# Model card: logger_stats detector {card.detector_sha[:SHA_CHARS]}\n\n"
            "Written by `leakpipe ship` from its own evaluation (reports/shipped_model_card.md, "
            "and the registered version's description).")


def _model(card: StatsCardInputs) -> str:
    d = card.detector
    return ("## Model\n\n" + statistics_text(d, card.metrics) + "\n"
            f"- Operating point: threshold {d.prob_threshold:.4f} on `leak_prob` (Platt-"
            f"calibrated; raw model probability {d.threshold:.4f}), chosen by "
            f"{card.criterion}; one verdict per recording.\n"
            f"- Signal checks (`build.quality.reject`): {_list(d.quality.reject) or 'none'}; "
            "a refused recording (a dead logger above all) is `unusable`, never NOLEAK.\n\n"
            + coefficients_table(d))


def statistics_text(d: StatsDetector, metrics: Mapping[str, float], *,
                    names: bool = True) -> str:
    """Two bullets: what a logger_stats model reads (``build.stats``) and which statistics it
    uses, each named unless ``names`` is false (a fused detector's card, which must stay short
    enough for a registry description, says the same of its statistics part and leaves the
    names to the coefficients' table)."""
    spec, net = d.stats, d.net
    every = len(net.names) == len(stat_names(spec))
    used = ("." if every else f": {', '.join(f'`{n}`' for n in net.names)}." if names
            else "; the largest coefficients below.")       # every one: no list to read
    return ("- Reads the whole recording's level statistics at its own sample rate "
            "(leakpipe/features/recording_stats.py): frames of "
            f"{spec.frame_s:g} s, level percentiles {_list(spec.percentiles)}, spread (p90 - "
            "p10) and standard deviation, overall and per octave band at "
            f"{_list(spec.band_centres_hz)} Hz, floor {spec.floor_db:g} dB "
            "(params.yaml `build.stats`).\n"
            f"- Uses {len(net.names)} of the {len(stat_names(spec))} statistics, standardised "
            "with the training recordings' means and standard deviations (a band missing at a "
            "recording's rate takes the mean: no evidence either way), in an L2 logistic "
            f"regression{_c(metrics)}{used}")


def coefficients_table(d: StatsDetector) -> str:
    """The model's largest coefficients (``TOP_COEFFICIENTS``) with the train means and sds."""
    net = d.net
    weight = net.linear.weight.detach().double().numpy()[0]                 # (S,)
    order = np.argsort(-np.abs(weight), kind="stable")[:TOP_COEFFICIENTS]
    rows = ["| statistic | coefficient (per train sd) | train mean | train sd |",
            "|---|---|---|---|"]
    rows += [f"| {net.names[i]} | {weight[i]:+.3f} | {float(net.mean[i]):.2f} | "
             f"{float(net.scale[i]):.2f} |" for i in order]
    bias = float(net.linear.bias.detach()[0])
    return (f"Largest coefficients ({len(order)} of {len(weight)}; positive: towards LEAK; "
            f"bias {bias:+.3f}):\n\n" + "\n".join(rows))


def _data(card: StatsCardInputs) -> str:
    sha = {k: v[:SHA_CHARS] for k, v in card.split_sha.items()}
    fitted = ", ".join(f"{s} split sha256 {sha[s]}" for s in ("train", "val") if s in sha)
    test = f"; test split sha256 {sha['test']}" if "test" in sha else ""
    return ("## Data\n\n"
            f"- Source: `{card.source}` (params.yaml `build.source`).\n"
            "- Fitted on the train and val recordings pooled (the regularisation strength by "
            "grouped inner cross-validation over their sites, the threshold and calibration on "
            f"their out-of-fold scores){': ' + fitted if fitted else ''}; the val figures are "
            "out-of-fold.\n"
            f"- Test recordings at sites disjoint from train and val, scored once{test}.")


def _domain(card: StatsCardInputs) -> str:
    return "## Domain check\n\n" + domain_text(card.domain,
                                                 card.detector.missing_share is not None)


def domain_text(domain: Mapping[str, float], knows_missing: bool = True) -> str:
    """What the statistics' domain check measures, and the share of val and test recordings it
    flagged where ``domain`` (``stats_domain.shifted_shares``) has them. ``knows_missing``:
    the detector keeps the share of training recordings that lacked each statistic (files
    written before it did call any missing statistic shifted)."""
    missing = (f"a statistic the model reads is missing at its rate (an octave band above its "
               f"Nyquist frequency) that training lacked on under {MIN_MISSING_SHARE:.0%} of "
               "its recordings (a band that the training loggers' rates often left missing was "
               "learnt with its imputation)" if knows_missing else
               "a statistic the model reads is missing at its rate (an octave band above its "
               "Nyquist frequency)")
    head = ("A recording is `shifted` when one of its statistics lies more than "
            f"{Z_LIMIT:g} training standard deviations from the training mean, or {missing}; "
            "the call is made all the same, verdict UNCERTAIN "
            "(leakpipe/decision/stats_domain.py).")
    shares = [f"{name} {_share(domain, name)}" for name in ("val", "test")
              if f"domain/{name}_recordings" in domain]
    if not shares:
        return head
    return head + (" Flagged here: " + "; ".join(shares) + " (val recordings are among those "
                   "the means and deviations come from; test's sites are new).")


def _limits(card: StatsCardInputs) -> str:
    return ("## Known limits\n\n"
            "- The figures hold for recordings like the test split's: the same source, network "
            "and loggers, at sites the detector has not seen. On another network measure it "
            "with grouped cross-validation on that network's own recordings (`leakpipe cv`) "
            "before acting on the calls.\n"
            "- Absolute level statistics (`*_pXX`) depend on sensor, gain and coupling; the "
            "gain-free ones (`*_spread`, `*_std`, `*_rel`) do not "
            "(`baselines.logger_stats.forms`).\n"
            "- A recording is summarised as a whole: a leak heard in part of a long recording "
            "weighs by its share of the frames; a steady non-leak noise (a pump, a ringing "
            "mount) that stays loud in the quiet moments looks like a leak.\n"
            "- Sites, not recordings, are the independent units: the intervals resample sites.")


def _c(metrics: Mapping[str, float]) -> str:
    c = metrics.get("eval/C")
    return f" (C {c:g})" if c is not None and math.isfinite(c) else ""


def _share(domain: Mapping[str, float], name: str) -> str:
    n = int(domain[f"domain/{name}_recordings"])
    rate = domain.get(f"domain/{name}_shifted_rate", math.nan)
    low = domain.get(f"domain/{name}_shifted_rate_ci_low", math.nan)
    high = domain.get(f"domain/{name}_shifted_rate_ci_high", math.nan)
    if not n or not math.isfinite(rate):
        return "n/a (no recordings)"
    return (f"{round(rate * n)} of {n} ({100 * rate:.1f} %, 95 % interval "
            f"{100 * low:.1f}-{100 * high:.1f} %)")


def _count(metrics: Mapping[str, float], key: str) -> str:
    value = metrics.get(key)
    return str(int(value)) if value is not None and math.isfinite(value) else "?"


def _list(values: tuple) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float | int) else str(v) for v in values)


__all__ = ["RECORDING_FIGURES", "StatsCardInputs", "coefficients_table", "domain_text",
           "recording_figures_section", "statistics_text", "stats_model_card"]
