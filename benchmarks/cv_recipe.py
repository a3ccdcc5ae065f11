"""Which recipe generalises to unseen sites: grouped cross-validation of recipe variants on the
synthetic small-network scenario (and on any manifest you give it).

Renders the small-network scenario (`leakpipe synth --scenario small_network`; docs/synth.md)
into a scratch folder unless ``--source`` names recordings, then runs ``leakpipe cv --source``
once per variant, each a set of params overrides on top of ``--params`` with the CNN's full
training budget (``cv.epochs`` = ``train.epochs``, every batch). Writes one JSON with, per
variant: the pooled ROC-AUC / file F1 / balanced accuracy of every method with its
site-bootstrap interval, the paired CNN-minus-best-baseline difference, and the CNN's inner-val
F1 per epoch in every fold (does it still peak at epoch 1?).

    python benchmarks/cv_recipe.py [--variants base,level_none,...] [--folds 5] \
        [--source MANIFEST] [--out benchmarks/results/cv_recipe.json]

CPU, 2 cores: about 5-8 minutes per variant on the default scenario.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

# name -> (why, params overrides as dotted keys); each states the physical reason it might help
NO_HEAD = {"model.level_input": False}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("the committed defaults: input_norm none + model.level_input (gain-free conv "
                "features, the level and band levels as separate head inputs)", {}),
    "level_kept": ("level kept in every conv feature, no level head",
                   {**NO_HEAD}),
    "level_free": ("each clip's mean log-mel removed (input_norm clip_level), no level head",
                   {**NO_HEAD, "train.input_norm": "clip_level"}),
    "none_mean": ("level kept + the clip's mean segment probability (a leak is stationary)",
                  {**NO_HEAD, "decision.rule": "mean"}),
    "none_auc": ("level kept + early stopping on val ROC-AUC: with 2-3 val sites F1 ties",
                 {**NO_HEAD, "train.monitor": "val/file_roc_auc"}),
    "none_reg": ("level kept + dropout 0.5, weight decay 0.05, label smoothing 0.1",
                 {**NO_HEAD, "model.dropout": 0.5, "train.weight_decay": 0.05,
                  "train.label_smoothing": 0.1}),
    "none_native": ("level kept + features limited to the loggers' band (4096 Hz)",
                    {**NO_HEAD, "build.sample_rate": 4096, "build.fmax": 2048.0}),
    "none_lr": ("level kept + a 4x lower learning rate: fewer, smaller steps before the "
                "network memorises a few dozen sites",
                {**NO_HEAD, "train.learning_rate": 0.0005}),
    "none_small": ("level kept + less capacity to memorise sites",
                   {**NO_HEAD, "model.widths": [16, 32, 64], "model.hidden": 64}),
    "none_nogain": ("level kept, no random gain in augmentation (the loggers share a gain)",
                    {**NO_HEAD, "train.augment.gain_db": 0.0}),
    "no_augment": ("level-free input and augmentation off (mixing with other sites' non-leak "
                   "segments should break site shortcuts)",
                   {**NO_HEAD, "train.input_norm": "clip_level",
                    "train.augment.enabled": False}),
    "no_highpass": ("a DC offset reaches the lowest mel band", {"build.highpass_hz": 0.0}),
    "band_limit": ("random band-limiting: empty upper bands are no evidence",
                   {"train.augment.band_limit_prob": 0.5}),
}


def set_key(params: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = params
    for key in parents:
        node = node[key]
    if leaf not in node:
        raise KeyError(f"params has no key {dotted}")
    node[leaf] = value


def variant_params(base: Path, overrides: dict[str, Any], folder: Path) -> Path:
    params = yaml.safe_load(base.read_text())
    params["cv"].update(epochs=params["train"]["epochs"], train_fraction=1.0)
    params["build"]["clips_per_recording"] = "all"
    params["build"]["on_error"] = "skip"
    for key, value in overrides.items():
        set_key(params, key, value)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def render_scenario(folder: Path, seed: int | None) -> Path:
    cmd = [sys.executable, "-m", "leakpipe.cli", "synth", "--scenario", "small_network",
           "--out", str(folder)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    subprocess.run(cmd, check=True, cwd=REPO)
    return folder / "manifest.csv"


def run_variant(name: str, source: Path, params: Path, folds: int, out: Path) -> dict[str, Any]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{out / 'mlflow.db'}"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "leakpipe.cli", "cv", "--source", str(source),
                    "--params", str(params), "--folds", str(folds), "--out", str(out),
                    "--no-progress"], check=True, cwd=REPO, env=env)
    summary = json.loads((out / "cv.json").read_text())
    monitor = yaml.safe_load(params.read_text())["train"]["monitor"]
    histories = []
    for result in sorted((out / "work").glob("fold-*/result.json")):
        cnn = json.loads(result.read_text())["methods"].get("cnn")
        if cnn:
            histories.append([h.get(monitor) for h in cnn["info"]["history"]])
    figures = ("roc_auc", "file_f1", "balanced_accuracy")
    return {"seconds": time.perf_counter() - start,
            "methods": {m: {f: {k: v[f][k] for k in ("mean", "ci_low", "ci_high")}
                            for f in figures} for m, v in summary["methods"].items()},
            "paired": summary.get("paired"), "sites": summary["sites"],
            "recordings": summary["recordings"], "clips": summary["clips"],
            "cnn_monitor": monitor, "cnn_val_per_epoch": histories,
            "cnn_best_epochs": [1 + int(max(range(len(h)), key=lambda i: h[i] or -1))
                                for h in histories if h]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated subset of {', '.join(VARIANTS)}")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--source", type=Path, default=None,
                        help="recordings to use instead of the rendered scenario")
    parser.add_argument("--seed", type=int, default=None, help="scenario seed")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (kept)")
    parser.add_argument("--out", type=Path, default=RESULTS / "cv_recipe.json")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="leakpipe-cv-recipe-"))
    work.mkdir(parents=True, exist_ok=True)
    source = args.source or render_scenario(work / "scenario", args.seed)
    report = json.loads(args.out.read_text()) if args.out.is_file() else {}
    report.setdefault("variants", {})
    report.update({"source": "small_network scenario" if args.source is None
                   else str(args.source), "folds": args.folds,
                   "machine": f"{os.cpu_count()} CPU cores"})
    for name in args.variants.split(","):
        why, overrides = VARIANTS[name]
        folder = work / name
        folder.mkdir(exist_ok=True)
        params = variant_params(args.params, overrides, folder)
        result = run_variant(name, source, params, args.folds, folder / "out")
        report["variants"][name] = {"why": why, "overrides": overrides, **result}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
        m = result["methods"]
        print(f"{name}: " + "; ".join(f"{k} {v['roc_auc']['mean']:.3f} "
                                      f"({v['roc_auc']['ci_low']:.2f}-{v['roc_auc']['ci_high']:.2f})"
                                      for k, v in m.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
