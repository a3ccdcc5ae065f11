"""How each stage's time and peak memory grow with the data: the pipeline at several sizes.

Sizes are multiples of the default synthetic benchmark (`synth.n_sites` sites; every site holds
the same recordings, so recordings grow with sites). At each size the stages run as `leakpipe`
commands in fresh processes, as `dvc repro` runs them, on a private params file (train: one
epoch; everything else as in params.yaml) and a private MLflow store: synth, build, validate,
preload, train (one epoch), evaluate, baselines. Per stage and size: wall seconds and the peak
RSS of that stage's process (``os.wait4``'s rusage of the child itself, not of its parent).
Then per stage the exponent b of time ~ size^b and of peak RSS ~ size^b (least squares on the
logs); b <= 1.1 is linear in the data, and a streaming stage's memory should stay flat.

The sizes default to 1/4, 1/2 and 1x the default: on the 2-core machine one size of 1x takes
about ten minutes, 4x about forty and 16x hours, so the larger multiples are given with
``--sizes`` where there is the time. The JSON records the machine, its load average at the
start and the end, and which sizes ran.

    python benchmarks/perf/bench_scaling.py [--sizes 0.25 0.5 1] \
        [--out benchmarks/results/scaling.json] [--plot benchmarks/results/scaling.png]

Figures: docs/results/performance.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_build import machine  # noqa: E402  (a sibling script, not a package)

REPO = Path(__file__).resolve().parents[2]
STAGES = ("synth", "build", "validate", "preload", "train", "evaluate", "baselines")
LINEAR = 1.1      # the target exponent for time
QUIET_ALREADY = ("preload", "baselines")   # commands without a progress bar to hide


def stage_commands(root: Path) -> dict[str, list[str]]:
    """The stages' command lines in ``root`` (paths as dvc.yaml's, under ``root``)."""
    p, d = str(root / "params.yaml"), root
    data, stamp, plan = d / "processed", d / "validated.json", d / "preload.json"
    return {
        "synth": ["synth", "--params", p, "--out", str(d / "raw")],
        "build": ["build", "--params", p, "--source", str(d / "raw"), "--out-dir", str(data),
                  "--report", str(d / "build.json")],
        "validate": ["validate", "--params", p, "--data-dir", str(data), "--report",
                     str(d / "validation.json"), "--html", str(d / "validation.html"),
                     "--stamp", str(stamp)],
        "preload": ["preload", "--params", p, "--data-dir", str(data), "--validated",
                    str(stamp), "--report", str(plan)],
        "train": ["train", "--params", p, "--train", str(data / "train.h5"), "--val",
                  str(data / "val.h5"), "--plan", str(plan), "--model", str(d / "model.pt"),
                  "--metrics", str(d / "train.json"), "--plots", str(d / "history.csv"),
                  "--checkpoints", str(d / "checkpoints"), "--validated", str(stamp)],
        "evaluate": ["evaluate", "--params", p, "--model", str(d / "model.pt"), "--data-dir",
                     str(data), "--plan", str(plan), "--metrics", str(d / "eval.json"),
                     "--plots-dir", str(d / "plots_eval"), "--predictions",
                     str(d / "predictions.csv"), "--detector", str(d / "detector.pt"),
                     "--validated", str(stamp), "--model-card", str(d / "model_card.md")],
        "baselines": ["baselines", "--params", p, "--data-dir", str(data), "--validated",
                      str(stamp), "--cnn-metrics", str(d / "eval.json"), "--cnn-predictions",
                      str(d / "predictions.csv"), "--metrics", str(d / "baselines.json"),
                      "--plots-dir", str(d / "plots_baselines")],
    }


def write_params(root: Path, n_sites: int) -> None:
    """params.yaml with ``n_sites`` synthetic sites, one training epoch and no registry."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["synth"]["n_sites"] = n_sites
    params["train"]["epochs"] = 1
    params["evaluate"]["registered_model"] = ""
    params["build"]["source"] = str(root / "raw")
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def run_stage(argv: list[str], root: Path) -> dict[str, float]:
    """One stage in a fresh process: its wall seconds and its own peak RSS (MiB)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
           "DVC_ROOT": str(root)}
    log = (root / "logs").joinpath(f"{argv[0]}.log")
    log.parent.mkdir(exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as handle:
        quiet = [] if argv[0] in QUIET_ALREADY else ["--no-progress"]
        child = subprocess.Popen([sys.executable, "-m", "leakpipe.cli", *argv, *quiet],
                                 cwd=root, env=env, stdout=handle, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{argv[0]} failed with exit code {code}; see {log}:\n"
                           + log.read_text()[-2000:])
    return {"seconds": round(seconds, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def exponent(sizes: list[float], values: list[float]) -> float | None:
    """b of values ~ sizes^b by least squares on the logs; None with fewer than two sizes."""
    if len(sizes) < 2:
        return None
    slope, _ = np.polyfit(np.log(sizes), np.log(np.maximum(values, 1e-9)), 1)
    return round(float(slope), 3)


def marginal_ratio(recordings: list[int], values: list[float]) -> float | None:
    """Cost per added recording between the two largest sizes over that between the two
    smallest: about 1 when a stage is linear beyond its fixed cost (imports, process start,
    which flatten the plain exponent at small sizes), above 1 when it grows faster than its
    data. None with fewer than three sizes."""
    if len(recordings) < 3:
        return None
    low = (values[1] - values[0]) / (recordings[1] - recordings[0])
    high = (values[-1] - values[-2]) / (recordings[-1] - recordings[-2])
    return round(high / low, 2) if low > 0 else None


def summarize(runs: list[dict], default_sites: int, load: dict[str, float]) -> dict:
    """The JSON summary of ``runs`` (one per size, smallest first)."""
    recordings = [r["recordings"] for r in runs]
    sizes = [n / recordings[0] for n in recordings]
    exponents = {}
    for stage in STAGES:
        seconds = [r["stages"][stage]["seconds"] for r in runs]
        exponents[stage] = {
            "time": exponent(sizes, seconds),
            "memory": exponent(sizes, [r["stages"][stage]["peak_rss_mib"] for r in runs]),
            "time_marginal_ratio": marginal_ratio(recordings, seconds)}
    above = sorted(s for s, e in exponents.items()
                   if e["time"] is not None and e["time"] > LINEAR)
    return {
        "machine": machine(), "load_average_1min": load,
        "measured": "wall seconds and the peak RSS (MiB) of each stage's own process, fresh "
                    "processes as dvc repro runs them (imports included: a fixed cost that "
                    "flattens the exponents of small stages, hence also time_marginal_ratio); "
                    "train one epoch",
        "sizes_are": f"multiples of the default {default_sites} synthetic sites",
        "exponents_fit_on": "recordings relative to the smallest size",
        "target_time_exponent": LINEAR, "stages_above_target": above,
        "exponents": exponents, "runs": runs}


def plot(summary: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size"] for r in summary["runs"]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for stage in STAGES:
        for ax, key in zip(axes, ("seconds", "peak_rss_mib"), strict=True):
            b = summary["exponents"][stage]["time" if key == "seconds" else "memory"]
            ax.plot(sizes, [r["stages"][stage][key] for r in summary["runs"]], marker="o",
                    label=f"{stage} (b={b:.2f})" if b is not None else stage)
    for ax, title in zip(axes, ("wall time (s)", "peak RSS of the stage process (MiB)"),
                         strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("data size (x the default synthetic benchmark)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Stage cost against data size ({summary['machine']['cpu']}, "
                 f"{summary['machine']['logical_cores']} cores)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.25, 0.5, 1.0],
                        help="multiples of the default synth.n_sites (default: 0.25 0.5 1)")
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "scaling.json")
    parser.add_argument("--plot", type=Path,
                        default=REPO / "benchmarks" / "results" / "scaling.png")
    parser.add_argument("--summarize", action="store_true",
                        help="recompute the summary and plot from --out's runs (no stage runs)")
    args = parser.parse_args()
    if args.summarize:
        old = json.loads(args.out.read_text())
        summary = summarize(old["runs"], int(old["sizes_are"].split()[4]),
                            old["load_average_1min"])
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
        plot(summary, args.plot)
        return
    default_sites = yaml.safe_load((REPO / "params.yaml").read_text())["synth"]["n_sites"]
    load_start = os.getloadavg()[0]
    runs = []
    for size in sorted(args.sizes):
        n_sites = max(10, int(round(default_sites * size)))
        with tempfile.TemporaryDirectory(prefix="leakpipe-scaling-") as tmp:
            root = Path(tmp)
            write_params(root, n_sites)
            stages = {}
            for stage, argv in stage_commands(root).items():
                stages[stage] = run_stage(argv, root)
                print(f"size {size:g} ({n_sites} sites) {stage:<10}"
                      f"{stages[stage]['seconds']:>9.1f} s{stages[stage]['peak_rss_mib']:>9.0f} "
                      "MiB", flush=True)
            recordings = json.loads((root / "build.json").read_text())["n_recordings"]
        runs.append({"size": size, "n_sites": n_sites, "recordings": recordings,
                     "stages": stages})
    summary = summarize(runs, default_sites, {"start": round(load_start, 2),
                                              "end": round(os.getloadavg()[0], 2)})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    plot(summary, args.plot)
    print(f"{'stage':<10}{'time b':>8}{'memory b':>10}{'marginal':>10}")
    for stage, e in summary["exponents"].items():
        print(f"{stage:<10}{_fmt(e['time']):>8}{_fmt(e['memory']):>10}"
              f"{_fmt(e['time_marginal_ratio']):>10}")
    print(f"-> {args.out}, {args.plot}")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.2f}"


if __name__ == "__main__":
    main()
