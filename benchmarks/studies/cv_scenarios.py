"""Every method's recording-level figures on the small-network scenario, as a new user gets
them: `leakpipe synth --scenario small_network --seed S` into a scratch folder, then
`leakpipe cv --source` with every default (params.yaml untouched), one run per scenario seed.

Writes ``benchmarks/results/cv_scenarios.json``: per seed the sites / recordings, per method the
pooled out-of-fold recording ROC-AUC / F1 / balanced accuracy with their site-bootstrap
intervals and the clip ROC-AUC (the first draw's), the recording ROC-AUC of every draw of the
site-to-fold assignment (``cv.source_repeats``) with their mean and its interval, each method
minus the best logger's rule (``paired_vs_rule``), cv's ``selected`` kind (on the draws' mean)
and its nested estimate, the seconds of the run, the machine.
README's recording-level table is rendered from it and `metrics/cv.json`
(``benchmarks/studies/recording_table.py``).

    python benchmarks/studies/cv_scenarios.py [--seeds 20250333,1] \
        [--out benchmarks/results/cv_scenarios.json]

CPU, 2 cores: a few minutes per seed (30 sites).

Figures: docs/results/recording-level.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
SEEDS = (20250333, 1)     # synth.seed (the default) and a second rendering
FIGURES = ("recording_roc_auc", "recording_f1", "recording_balanced_accuracy", "clip_roc_auc")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def summarise(summary: dict[str, Any]) -> dict[str, Any]:
    """The figures README shows, from one cv.json."""
    methods = {m: {f: {k: figs[f][k] for k in ("mean", "ci_low", "ci_high")}
                   for f in FIGURES} for m, figs in summary["methods"].items()}
    for m, figs in summary["methods"].items():
        auc = figs["recording_roc_auc"]
        methods[m]["recording_roc_auc_draws"] = {
            k: auc[k] for k in ("draws", "draws_mean", "draws_ci_low", "draws_ci_high")
            if k in auc}
    out = {"sites": summary["sites"], "recordings": summary["recordings"],
           "leak_recordings": summary.get("leak_recordings"), "folds": summary["folds"],
           "repeats": summary.get("repeats", 1), "selected": summary["selected"],
           "methods": methods}
    if "paired_vs_rule" in summary:
        out["paired_vs_rule"] = summary["paired_vs_rule"]
    if "selected_nested" in summary:
        nested = summary["selected_nested"]
        out["selected_nested"] = {"per_fold": nested["per_fold"],
                                  "recording_roc_auc": {k: nested["recording_roc_auc"][k]
                                                        for k in ("mean", "ci_low",
                                                                  "ci_high")}}
    return out


def run_seed(seed: int, scratch: Path, env: dict[str, str]) -> dict[str, Any]:
    cli = [sys.executable, "-m", "leakpipe.cli"]
    data = scratch / f"net-{seed}"
    subprocess.run([*cli, "synth", "--scenario", "small_network", "--seed", str(seed),
                    "--out", str(data), "--no-progress"], check=True, cwd=REPO, env=env)
    out = scratch / f"cv-{seed}"
    start = time.perf_counter()
    subprocess.run([*cli, "cv", "--source", str(data / "manifest.csv"), "--out", str(out),
                    "--no-progress"], check=True, cwd=REPO, env=env)
    result = summarise(json.loads((out / "cv.json").read_text()))
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)),
                        help="scenario seeds, comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS / "cv_scenarios.json")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="leakpipe-cv-scenarios-") as tmp:
        scratch = Path(tmp)
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{scratch / 'mlflow.db'}",
               "PYTHONPATH": str(REPO)}
        results = {str(seed): run_seed(seed, scratch, env) for seed in seeds}
    report = {"scenario": "small_network", "command": "leakpipe cv --source <manifest> "
              "(every default)", "machine": machine(), "seeds": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for seed, r in results.items():
        auc = {m: round(f["recording_roc_auc"]["mean"], 3) for m, f in r["methods"].items()}
        print(f"seed {seed}: {r['sites']} sites, {r['recordings']} recordings, selected "
              f"{r['selected']}; recording ROC-AUC {auc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
