"""What the adapt stage reports: the per-round table, metrics/adapt.json, the round figure, the
MLflow names of the round runs and the description of the registered adapted detector.

Every round is one row: its status (seed / accepted / rejected), the val figures at the
operating point re-chosen on val, the labelled field check set's figures at that point (the
false-positive rate and sensitivity the demo is about), the pseudo-label counts, how many
recordings changed label since the previous accepted round and, where the pool's hidden truth
is given, how many pseudo-labels were right. The seed row is the detector before adaptation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ROUND_COLUMNS = ("round", "status", "threshold", "val_f1", "val_accuracy", "check_fpr",
                 "check_sensitivity", "check_f1", "check_accuracy", "check_roc_auc",
                 "pseudo_leak", "pseudo_not_leak", "pseudo_within_margin",
                 "pseudo_segments", "pseudo_rows", "changed", "pseudo_label_accuracy")
FIGURE_SIZE = (11.0, 4.2)


def _get(entry: Mapping[str, Any], *keys: str) -> Any:
    value: Any = entry
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def round_row(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The table row of one round entry (``None`` where the round has no such figure)."""
    return {
        "round": entry["round"], "status": entry["status"], "threshold": entry.get("threshold"),
        "val_f1": _get(entry, "val", "f1"), "val_accuracy": _get(entry, "val", "accuracy"),
        "check_fpr": _get(entry, "check", "fpr"),
        "check_sensitivity": _get(entry, "check", "recall"),
        "check_f1": _get(entry, "check", "f1"), "check_accuracy": _get(entry, "check", "accuracy"),
        "check_roc_auc": _get(entry, "check", "roc_auc"),
        "pseudo_leak": _get(entry, "pseudo", "leak"),
        "pseudo_not_leak": _get(entry, "pseudo", "not_leak"),
        "pseudo_within_margin": _get(entry, "pseudo", "within_margin"),
        "pseudo_segments": _get(entry, "pseudo", "segments"),
        "pseudo_rows": _get(entry, "split", "pseudo_rows"),
        "changed": entry.get("changed"),
        "pseudo_label_accuracy": _get(entry, "pool", "label_accuracy"),
    }


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items()}
    return value


def metrics_document(entries: Sequence[Mapping[str, Any]], final_round: int,
                     stop_reason: str) -> dict[str, Any]:
    """metrics/adapt.json: every round under ``round_<r>`` (DVC shows ``round_1.check.fpr``),
    the round the adapted detector comes from and why adaptation ended."""
    doc: dict[str, Any] = {"final_round": final_round, "stop_reason": stop_reason,
                           "rounds_accepted": sum(e["status"] == "accepted" for e in entries)}
    for entry in entries:
        doc[f"round_{entry['round']}"] = _clean({k: v for k, v in entry.items()
                                                 if k not in ("labels", "round")})
    return doc


def round_run_name(stage: str, r: int, status: str = "") -> str:
    """A round's MLflow run name: ``adapt round 2 (accepted)``; ``adapt round 2`` while it
    runs (a round killed mid-way keeps that name)."""
    return f"{stage} round {r}" + (f" ({status})" if status else "")


def _rate(value: Any) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def adapted_description(entries: Sequence[Mapping[str, Any]], final_round: int,
                        stop_reason: str, *, network: str, seed_sha: str, pool: int,
                        unit: str = "clip") -> str:
    """The description of the adapted detector's registered version (one paragraph): what it
    was adapted from and on, its operating point, its val and field-check figures next to the
    seed's, and what it was not scored on."""
    seed = entries[0]
    final = next(e for e in entries if e["round"] == final_round)
    accepted = sum(e["status"] == "accepted" for e in entries)
    text = (f"Field-adapted leak detector of `leakpipe adapt`: the seed detector (file "
            f"sha256 {seed_sha[:12]}; {network}) refitted in {accepted} accepted round(s) "
            f"of pseudo-labelling on {pool} unlabelled field recordings plus the labelled "
            f"train split; this is round {final_round}. Operating point re-chosen on the val "
            f"split: threshold {final['threshold']:g}. Val, per {unit}: F1 "
            f"{_rate(_get(final, 'val', 'f1'))} (seed {_rate(_get(seed, 'val', 'f1'))}).")
    if final.get("check"):
        text += (" Labelled field check set, per recording: false-positive rate "
                 f"{_rate(_get(final, 'check', 'fpr'))} (seed "
                 f"{_rate(_get(seed, 'check', 'fpr'))}), sensitivity "
                 f"{_rate(_get(final, 'check', 'recall'))} (seed "
                 f"{_rate(_get(seed, 'check', 'recall'))}), F1 "
                 f"{_rate(_get(final, 'check', 'f1'))}.")
    return text + (" Not scored on the test split and without intervals: val chose its "
                   "threshold and the check set accepted its rounds, so both figures lean "
                   f"optimistic. Adaptation stopped: {stop_reason}.")


def round_metrics(entry: Mapping[str, Any]) -> dict[str, float]:
    """The numeric figures of one round for MLflow (``check/fpr``, ``val/f1``, ...)."""
    out: dict[str, float] = {}
    for section in ("val", "check", "pseudo", "pool", "split"):
        for key, value in (entry.get(section) or {}).items():
            if isinstance(value, int | float) and math.isfinite(value):
                out[f"{section}/{key}"] = float(value)
    if entry.get("changed") is not None:
        out["pseudo/changed"] = float(entry["changed"])
    out["accepted"] = float(entry["status"] != "rejected")
    return out


def rounds_figure(rows: Sequence[Mapping[str, Any]]) -> Figure:
    """Left: check-set FPR and sensitivity, val F1 per round (rejected rounds hollow);
    right: pseudo-labelled recordings per class per round."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGURE_SIZE, layout="constrained")
    left, right = fig.subplots(1, 2)
    x = [r["round"] for r in rows]
    for key, label, marker in (("check_fpr", "field check FPR", "o"),
                               ("check_sensitivity", "field check sensitivity", "s"),
                               ("val_f1", "val clip F1", "^")):
        y = [math.nan if r[key] is None else r[key] for r in rows]
        left.plot(x, y, marker=marker, label=label)
        rejected = [(xi, yi) for xi, yi, r in zip(x, y, rows, strict=True)
                    if r["status"] == "rejected"]
        if rejected:
            left.scatter(*zip(*rejected, strict=True), s=120, facecolors="none",
                         edgecolors="red", label="_rejected")
    left.set(xlabel="round (0 = before adaptation)", ylabel="rate", ylim=(-0.02, 1.02),
             title="Field adaptation per round (red ring: rejected)")
    left.set_xticks(x)
    left.legend(loc="best")
    width = 0.4
    leak = [r["pseudo_leak"] or 0 for r in rows]
    other = [r["pseudo_not_leak"] or 0 for r in rows]
    right.bar([i - width / 2 for i in x], leak, width, label="pseudo LEAK")
    right.bar([i + width / 2 for i in x], other, width, label="pseudo not LEAK")
    right.set(xlabel="labels made after round", ylabel="pool recordings",
              title="Pseudo-labels per round")
    right.set_xticks(x)
    right.legend(loc="best")
    return fig
