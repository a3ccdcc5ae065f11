"""The recording-level table of README.md and docs/results/recording-level.md, rendered from the
committed JSON it reports.

Sources: `metrics/cv.json` (the default benchmark, stage `crossval`),
`benchmarks/results/cv_scenarios.json` (the small-network scenario at both seeds,
``benchmarks/studies/cv_scenarios.py``) and `benchmarks/results/seed_spread.json` (the default
benchmark over training seeds, ``benchmarks/studies/seed_spread.py``). The table sits in each
doc between the markers below;
``--write`` replaces it there, and tests/test_readme_tables.py fails when a doc and the JSON
disagree (a figure is never typed by hand).

    python benchmarks/studies/recording_table.py [--write]

Figures: README.md, docs/results/recording-level.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = (README, REPO / "docs" / "results" / "recording-level.md")
CV = REPO / "metrics" / "cv.json"
SCENARIOS = REPO / "benchmarks" / "results" / "cv_scenarios.json"
SEEDS = REPO / "benchmarks" / "results" / "seed_spread.json"
START, END = "<!-- recording-table:start -->", "<!-- recording-table:end -->"
METHODS = ("min_level", "band_min_level", "logger_stats", "cnn", "fused", "random_forest", "svm",
           "xgboost", "level_logreg")
NAMES = {"min_level": "min level (logger's rule)", "band_min_level": "band min level",
         "logger_stats": "logger stats", "cnn": "CNN", "fused": "fused",
         "random_forest": "random forest", "svm": "SVM", "xgboost": "XGBoost",
         "level_logreg": "clip level"}


def _cell(fig: Mapping[str, float] | None, bold: bool = False) -> str:
    if fig is None or not math.isfinite(fig["mean"]):
        return "-"
    text = f"{fig['mean']:.3f}"
    if bold:
        text = f"**{text}**"
    if math.isfinite(fig.get("ci_low", math.nan)):
        text += f" ({fig['ci_low']:.2f}-{fig['ci_high']:.2f})"
    return text


def _row(label: str, summary: Mapping[str, Any]) -> str:
    methods = summary["methods"]
    best = max((m for m in METHODS if m in methods),
               key=lambda m: methods[m]["recording_roc_auc"]["mean"])
    cells = [_cell(methods[m]["recording_roc_auc"] if m in methods else None, m == best)
             for m in METHODS]
    nested = summary.get("selected_nested")
    picked = summary["selected"] or "-"
    if nested:
        picked += f"; nested {_cell(nested['recording_roc_auc'])}"
    size = f"{summary['sites']} sites, {summary['recordings']} recordings"
    return f"| {label} ({size}) | " + " | ".join(cells) + f" | {picked} |"


def seed_line(seeds: Mapping[str, Any]) -> str:
    """The default benchmark's spread over training seeds: the methods that move, their mean
    and range; the ones that do not, named."""
    runs, spread = seeds["runs"], seeds["spread"]
    moving = [m for m in METHODS if m in spread and spread[m]["recording_roc_auc"]["range"] > 0]
    still = [NAMES[m] for m in METHODS if m in spread and m not in moving]
    first, last = runs[0]["seeds"], runs[-1]["seeds"]
    parts = [f"{NAMES[m]} {spread[m]['recording_roc_auc']['mean']:.3f} "
             f"({spread[m]['recording_roc_auc']['min']:.3f}-"
             f"{spread[m]['recording_roc_auc']['max']:.3f})" for m in moving]
    text = (f"Over {len(runs)} training seeds of the default benchmark (train.seed "
            f"{first['train']}-{last['train']}, baselines.seed {first['baselines']}-"
            f"{last['baselines']}, folds fixed; {seeds['machine']}): " + ", ".join(parts))
    if still:
        text += f"; {', '.join(still)} the same in every run (deterministic fits)"
    return (text + ". A run on another CPU model differs from this one as another seed does "
            "(other float kernels round otherwise); how far was measured over seeds only. "
            "`benchmarks/studies/seed_spread.py`, `benchmarks/results/seed_spread.json`.")


def render(cv: Mapping[str, Any], scenarios: Mapping[str, Any] | None,
           seeds: Mapping[str, Any] | None = None) -> str:
    header = ("| data set | " + " | ".join(NAMES[m] for m in METHODS)
              + " | selected (nested estimate) |")
    lines = [header, "|" + "---|" * (len(METHODS) + 2),
             _row("default benchmark, `crossval` stage", cv)]
    if scenarios is not None:
        for seed, summary in scenarios["seeds"].items():
            lines.append(_row(f"small network, seed {seed}", summary))
    machine = scenarios["machine"] if scenarios is not None else "-"
    lines.append("")
    lines.append(f"Pooled out-of-fold recording ROC-AUC, 95 % site-bootstrap intervals; "
                 f"min level and band min level are the rule a noise logger applies, nothing "
                 f"fitted but the threshold (docs/baselines.md); `-`: a method the run did "
                 f"not hold; machine of the small-network runs: {machine}. Sources: "
                 f"`metrics/cv.json`, "
                 f"`benchmarks/results/cv_scenarios.json` (rendered by "
                 f"`benchmarks/studies/recording_table.py`).")
    if seeds is not None:
        lines += ["", seed_line(seeds)]
    return "\n".join(lines)


def current() -> str:
    cv = json.loads(CV.read_text())
    scenarios = json.loads(SCENARIOS.read_text()) if SCENARIOS.is_file() else None
    seeds = json.loads(SEEDS.read_text()) if SEEDS.is_file() else None
    return render(cv, scenarios, seeds)


def readme_block(text: str) -> str:
    """The table between the markers of a doc's text."""
    start, end = text.index(START) + len(START), text.index(END)
    return text[start:end].strip("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="replace the table in README.md and docs/results/recording-level.md")
    args = parser.parse_args(argv)
    table = current()
    if args.write:
        for doc in DOCS:
            text = doc.read_text()
            start, end = text.index(START) + len(START), text.index(END)
            doc.write_text(text[:start] + "\n" + table + "\n" + text[end:])
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
