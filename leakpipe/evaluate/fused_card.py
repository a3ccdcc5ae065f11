"""The model card of a `fused` detector: a CNN part and a statistics part, stacked.

A fused detector reads a recording twice from one decoding: its clips' log-mel segments (the
CNN part, evaluate's network as it is) and its level statistics (the statistics part, a
`logger_stats` model), and a logistic regression fitted on the val recordings (the stacker)
weighs the two parts' recording logits. Its card says what each part reads (the statistics'
description and largest coefficients are the `logger_stats` card's own text,
``evaluate.stats_card``), the stacker's weights beside each part's own test ROC-AUC (what the
stacking added), the operating point on the stacked probability, the val and test figures per
recording (the unit it decides), both parts' domain checks and where it must not be trusted.
As the other cards it is built from the evaluation alone (no clock, no host, no run id), so the
same data and code give the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from leakpipe.evaluate.model_card import intended_use
from leakpipe.evaluate.registration import SHA_CHARS, figure_text, network_text
from leakpipe.evaluate.stats_card import (
    coefficients_table,
    domain_text,
    recording_figures_section,
    statistics_text,
)
from leakpipe.stats_detector import FusedDetector


@dataclass(frozen=True)
class FusedCardInputs:
    """What the card says, gathered by the ship stage."""

    detector: FusedDetector
    metrics: Mapping[str, float]      # ship's: val/ and test/recording_* (+ _ci_*), eval/*,
                                      # test/<part>_recording_roc_auc
    criterion: str                    # evaluate.criterion: how the threshold was chosen
    confidence: float
    fusion_c: float                   # detector.fusion_C: the stacker's L2 strength
    detector_sha: str
    split_sha: Mapping[str, str]      # split -> its file's sha256 (those known)
    source: str                       # build.source, as params.yaml names it
    domain: Mapping[str, float]       # the statistics part's shifted shares of val and test
    per_condition: str = ""           # model_card.per_condition_section of the test recordings


def fused_model_card(card: FusedCardInputs) -> str:
    """The card as Markdown (the registered version's description and a DVC output)."""
    parts = [_head(card), intended_use(), _model(card), _cnn_part(card), _stats_part(card),
             _data(card), _figures(card), card.per_condition, _domain(card), _limits(card)]
    parts = [p for p in parts if p]
    return "\n\n".join(p.rstrip() for p in parts) + "\n"


def _head(card: FusedCardInputs) -> str:
    return (f"# Model card: fused detector {card.detector_sha[:SHA_CHARS]}\n\n"
            "Written by `leakpipe ship` from its own evaluation (reports/shipped_model_card.md, "
            "and the registered version's description).")


def _model(card: FusedCardInputs) -> str:
    d = card.detector
    stacker = d.stacker
    rows = ["| part | weight | its test recording ROC-AUC alone |", "|---|---|---|"]
    rows += [f"| {name} | {weight:+.3f} | "
             f"{figure_text(card.metrics, f'test/{name}_recording_roc_auc')} |"
             for name, weight in zip(stacker.names, stacker.weights, strict=True)]
    return ("## Model\n\n"
            "One decoding feeds both parts. The stacker (an L2 logistic regression, "
            f"`detector.fusion_C` {card.fusion_c:g}, fitted on the val recordings) adds each "
            f"part's recording logit times its weight to its bias ({stacker.bias:+.3f}): a "
            "part's evidence (`leakpipe explain`).\n\n" + "\n".join(rows) + "\n\n"
            f"- Operating point: threshold {d.prob_threshold:.4f} on `leak_prob` (Platt-"
            f"calibrated; raw stacked probability {d.threshold:.4f}), chosen on val by "
            f"{card.criterion}; one verdict per recording.\n"
            f"- Signal checks (`build.quality.reject`): {', '.join(d.quality.reject) or 'none'};"
            " a refused recording is `unusable`, never NOLEAK.")


def _cnn_part(card: FusedCardInputs) -> str:
    cnn = card.detector.cnn
    voting = cnn.voting
    return ("### CNN part\n\n"
            f"- {network_text(cnn)}; input normalisation `{cnn.input_norm}`: evaluate's "
            "detector as it is (reports/model_card.md).\n"
            f"- A recording's probability: the mean of its {cnn.features.clip_s:g} s clips' "
            f"`{voting.rule}` scores (`{voting.prob_mode}`, vote fraction "
            f"{voting.vote_fraction:g}).")


def _stats_part(card: FusedCardInputs) -> str:
    stats = card.detector.logger_stats
    return ("### Statistics part\n\n" + statistics_text(stats, card.metrics, names=False)
            + "\n\n"
            + coefficients_table(stats))


def _data(card: FusedCardInputs) -> str:
    sha = {k: v[:SHA_CHARS] for k, v in card.split_sha.items()}
    shas = "; ".join(f"{s} split sha256 {sha[s]}" for s in ("train", "val", "test") if s in sha)
    return ("## Data\n\n"
            f"- Source: `{card.source}` (params.yaml `build.source`)"
            f"{'; ' + shas if shas else ''}.\n"
            "- The CNN part trained on train; the statistics part fitted on train and val "
            "pooled (inner grouped CV; its val scores out-of-fold); the stacker, threshold and "
            "calibration on val (the val figures are not held out); test at new sites, scored "
            "once.")


def _figures(card: FusedCardInputs) -> str:
    return recording_figures_section(card.metrics, card.confidence, ("val", "test"))


def _domain(card: FusedCardInputs) -> str:
    ref = card.detector.cnn.domain
    cnn = (f"its band profile against evaluate's reference (threshold {ref.threshold:.3g}, set "
           "on val)" if ref is not None else "none (its network has no domain reference)")
    return ("## Domain check\n\n"
            f"Statistics part: "
            f"{domain_text(card.domain, card.detector.logger_stats.missing_share is not None)}"
            "\n\n"
            f"CNN part: {cnn}. Served, a recording is `shifted` when either part's check is.")


def _limits(card: FusedCardInputs) -> str:
    return ("## Known limits\n\n"
            "- The figures hold for recordings like the test split's; on another network "
            "measure it with `leakpipe cv` first: the stacker's weights are what each part was "
            "worth here.\n"
            "- Each part keeps its own limits (evaluate's card, the logger_stats card); sites, "
            "not recordings, are the independent units.")


__all__ = ["FusedCardInputs", "fused_model_card"]
