"""How logger_stats is fitted, measured: grouped inner CV over train + val (the default,
``baselines.logger_stats.inner_folds: 4``) against fitting on train and choosing on val
(``inner_folds: 1``), with `leakpipe cv` on renderings of the small-network scenario.

A utility's data set is a few dozen recordings at a few dozen sites, so a cv fold's inner val
holds a handful of recordings: too few to rank the L2 strengths or to place a threshold. Both
routes run the real `leakpipe cv --source` (method logger_stats only, params.yaml otherwise
untouched) on the same renderings and folds; per seed and route the pooled out-of-fold
recording ROC-AUC, F1 and balanced accuracy with their site-bootstrap intervals, then the
mean over seeds and the paired per-seed difference.

    python benchmarks/studies/logger_stats_fitting.py [--seeds 20250333,1,...] \
        [--out benchmarks/results/logger_stats_fitting.json]

CPU, 2 cores: about 20 s per seed and route.

Figures: docs/baselines.md, docs/results/logger-stats-fitting.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cv_scenarios import REPO, RESULTS, machine  # noqa: E402

SEEDS = (20250333, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
ROUTES = {"inner_cv": 4, "val_only": 1}          # route -> baselines.logger_stats.inner_folds
FIGURES = ("recording_roc_auc", "recording_f1", "recording_balanced_accuracy")


def params_for(inner_folds: int, scratch: Path) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["cv"]["methods"] = ["logger_stats"]
    params["baselines"]["logger_stats"]["inner_folds"] = inner_folds
    path = scratch / f"params-{inner_folds}.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def run_seed(seed: int, scratch: Path, params: dict[str, Path],
             env: dict[str, str]) -> dict[str, Any]:
    cli = [sys.executable, "-m", "leakpipe.cli"]
    data = scratch / f"net-{seed}"
    subprocess.run([*cli, "synth", "--scenario", "small_network", "--seed", str(seed),
                    "--out", str(data), "--no-progress"], check=True, cwd=REPO, env=env)
    out: dict[str, Any] = {}
    for route, path in params.items():
        cv_dir = scratch / f"cv-{seed}-{route}"
        subprocess.run([*cli, "cv", "--params", str(path), "--source",
                        str(data / "manifest.csv"), "--out", str(cv_dir), "--no-progress"],
                       check=True, cwd=REPO, env=env)
        summary = json.loads((cv_dir / "cv.json").read_text())
        figures = summary["methods"]["logger_stats"]
        out[route] = {f: {k: figures[f][k] for k in ("mean", "ci_low", "ci_high")}
                      for f in FIGURES}
        out["sites"], out["recordings"] = summary["sites"], summary["recordings"]
    return out


def overall(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Mean over seeds per route and figure, and the paired per-seed difference."""
    out: dict[str, Any] = {}
    for f in FIGURES:
        values = {r: np.array([s[r][f]["mean"] for s in results.values()]) for r in ROUTES}
        diff = values["inner_cv"] - values["val_only"]
        out[f] = {**{r: round(float(v.mean()), 4) for r, v in values.items()},
                  "difference_mean": round(float(diff.mean()), 4),
                  "difference_sd": round(float(diff.std(ddof=1)), 4) if len(diff) > 1 else None,
                  "seeds_better": int((diff > 0).sum()), "seeds": len(diff)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)),
                        help="scenario seeds, comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS / "logger_stats_fitting.json")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="leakpipe-stats-fitting-") as tmp:
        scratch = Path(tmp)
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{scratch / 'mlflow.db'}",
               "PYTHONPATH": str(REPO)}
        params = {route: params_for(k, scratch) for route, k in ROUTES.items()}
        results = {str(seed): run_seed(seed, scratch, params, env) for seed in seeds}
    report = {"scenario": "small_network", "method": "logger_stats",
              "routes": {r: f"baselines.logger_stats.inner_folds: {k}" for r, k in ROUTES.items()},
              "machine": machine(), "overall": overall(results), "seeds": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for f, row in report["overall"].items():
        print(f"{f}: inner_cv {row['inner_cv']:.3f}, val_only {row['val_only']:.3f}, "
              f"difference {row['difference_mean']:+.3f} (better on {row['seeds_better']} of "
              f"{row['seeds']} seeds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
