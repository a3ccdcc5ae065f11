"""Tuning throughput: trials per hour with 1 vs 2 local workers on this machine.

Runs the `tune` stage's own ``run_study`` on the default data (data/processed, reports/preload
.json: run `dvc repro preload` first) with a fixed, equal-cost study per worker count: the
same trials / epochs / train fraction, a space of learning rate and dropout only (batch size
fixed, so every trial costs the same), no pruning, no MLflow, a fresh journal each. Torch threads
follow the stage's rule (CPU cores / workers). The study wall time includes worker start-up.

    python benchmarks/perf/bench_tune.py [--trials 6] [--epochs 1] [--fraction 0.1]
                                    [--workers 1 2] [--out benchmarks/results/tune.json]

Figures: docs/results/performance.md, docs/tuning.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from leakpipe.tune.driver import TunePaths, run_study

REPO = Path(__file__).resolve().parents[2]
SECONDS_PER_HOUR = 3600.0
SPACE_KEYS = {"model": ("dropout",), "train": ("learning_rate",)}


def bench_params(folder: Path, trials: int, epochs: int, fraction: float) -> Path:
    """The repo's params with an equal-cost study (no pruning, lr and dropout only)."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    tune = raw["tune"]
    tune["space"] = {section: {key: tune["space"][section][key] for key in keys}
                     for section, keys in SPACE_KEYS.items()}
    tune.update(n_trials=trials, timeout_s=0, epochs=epochs, train_fraction=fraction,
                pruner="none", threads_per_worker=0)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_once(workers: int, trials: int, epochs: int, fraction: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="leakpipe-bench-tune-") as tmp:
        folder = Path(tmp)
        params = bench_params(folder, trials, epochs, fraction)
        paths = TunePaths(train=REPO / "data/processed/train.h5",
                          val=REPO / "data/processed/val.h5", plan=REPO / "reports/preload.json",
                          journal=folder / "journal.log", best=folder / "best.yaml",
                          metrics=folder / "tune.json",
                          validated=REPO / "reports/validated.json")
        start = time.perf_counter()
        summary = run_study(params, paths, workers=workers, progress=False, tracked=False)
        seconds = time.perf_counter() - start
    done = sum(summary.counts.values())
    return {"workers": workers, "trials": done, "seconds": round(seconds, 1),
            "trials_per_hour": round(done / seconds * SECONDS_PER_HOUR, 1),
            "study_seconds": round(summary.study_seconds, 1), "best_value": summary.best_value}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/tune.json")
    args = parser.parse_args()
    machine = {"cpus": len(os.sched_getaffinity(0)), "torch": torch.__version__,
               "python": platform.python_version(), "load_avg_1min_at_start": os.getloadavg()[0]}
    runs = [run_once(w, args.trials, args.epochs, args.fraction) for w in args.workers]
    machine["load_avg_1min_at_end"] = os.getloadavg()[0]
    base = runs[0]["trials_per_hour"]
    results = {"machine": machine,
               "study": {"trials": args.trials, "epochs": args.epochs,
                         "train_fraction": args.fraction, "space": SPACE_KEYS,
                         "data": "data/processed (default synthetic set)"},
               "runs": runs,
               "speedup_vs_first": {str(r["workers"]): round(r["trials_per_hour"] / base, 2)
                                    for r in runs}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
