"""How far the headline figures move with the training seeds: the `crossval` stage's pooled
out-of-fold recording ROC-AUC per method, re-run on the committed default benchmark splits with
other seeds of every trained method (`train.seed` for the CNN and the fused stack's CNN part,
`baselines.seed` for the random forest and XGBoost), folds unchanged (`cv.seed` fixed), so only
training randomness varies. The committed run (`metrics/cv.json`, the default seeds) is the
first of the seeds; a user who trains on another CPU sees a change of the same kind, because
float kernels differ across CPU models as initialisations differ across seeds.

Writes ``benchmarks/results/seed_spread.json``: per run the seeds and every method's pooled
recording ROC-AUC / F1 with site-bootstrap intervals and cv's selected kind; per method the
mean, min and max over the runs; the machine. README's results table quotes the spread
(``benchmarks/studies/recording_table.py``), docs/results/grouped-cv.md the per-seed figures.

    python benchmarks/studies/seed_spread.py [--offsets 1,2] \
        [--out benchmarks/results/seed_spread.json]

Needs the committed pipeline's outputs (`dvc repro crossval` or `make run`): data/processed,
reports/validated.json, reports/preload.json, metrics/cv.json. CPU, 2 cores: about 18 minutes
per extra run.

Figures: README.md, docs/results/recording-level.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cv_scenarios import machine  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
FIGURES = ("recording_roc_auc", "recording_f1")


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The figures the spread is taken over, from one cv.json."""
    methods = {m: {f: {k: round(figs[f][k], 4) for k in ("mean", "ci_low", "ci_high")}
                   for f in FIGURES} for m, figs in summary["methods"].items()}
    return {"selected": summary["selected"], "methods": methods}


def spread(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method and figure: mean, min and max of the pooled value over the runs."""
    out: dict[str, Any] = {}
    for method in runs[0]["methods"]:
        out[method] = {}
        for fig in FIGURES:
            values = [run["methods"][method][fig]["mean"] for run in runs]
            out[method][fig] = {"mean": round(statistics.fmean(values), 4),
                                "min": min(values), "max": max(values),
                                "range": round(max(values) - min(values), 4)}
    return out


def seeded_params(params: dict[str, Any], offset: int) -> dict[str, Any]:
    """params.yaml with every training seed moved by ``offset``; folds and bootstrap fixed."""
    out = json.loads(json.dumps(params))
    out["train"]["seed"] = params["train"]["seed"] + offset
    out["baselines"]["seed"] = params["baselines"]["seed"] + offset
    return out


def run_offset(offset: int, params: dict[str, Any], scratch: Path) -> dict[str, Any]:
    seeded = seeded_params(params, offset)
    path = scratch / f"params-{offset}.yaml"
    path.write_text(yaml.safe_dump(seeded, sort_keys=False))
    out = scratch / f"cv-{offset}"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "leakpipe.cli", "cv", "--params", str(path),
                    "--data-dir", "data/processed", "--validated", "reports/validated.json",
                    "--plan", "reports/preload.json", "--out", str(out), "--no-progress"],
                   check=True, cwd=REPO)
    result = figures(json.loads((out / "cv.json").read_text()))
    result["seeds"] = {"train": seeded["train"]["seed"], "baselines": seeded["baselines"]["seed"]}
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offsets", default="1,2",
                        help="seed offsets of the extra runs (default: 1,2)")
    parser.add_argument("--out", type=Path, default=RESULTS / "seed_spread.json")
    args = parser.parse_args(argv)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    committed = figures(json.loads((REPO / "metrics" / "cv.json").read_text()))
    committed["seeds"] = {"train": params["train"]["seed"],
                          "baselines": params["baselines"]["seed"]}
    committed["source"] = "metrics/cv.json"
    runs = [committed]
    with tempfile.TemporaryDirectory(prefix="leakpipe-seeds-") as tmp:
        for offset in (int(o) for o in args.offsets.split(",") if o.strip()):
            runs.append(run_offset(offset, params, Path(tmp)))
            print(f"offset {offset}: fused "
                  f"{runs[-1]['methods']['fused']['recording_roc_auc']['mean']:.3f}", flush=True)
    report = {"machine": machine(), "data": "default benchmark splits (data/processed)",
              "varied": ["train.seed", "baselines.seed"], "runs": runs, "spread": spread(runs)}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
