"""Which recipe generalises to unseen sites: grouped cross-validation of recipe variants on the
synthetic small-network scenario (and on any manifest you give it).

Renders the small-network scenario (`leakpipe synth --scenario small_network`; docs/synth.md)
into a scratch folder unless ``--source`` names recordings, then runs ``leakpipe cv --source``
once per variant, each a set of params overrides on top of ``--params`` with the CNN's full
training budget (``cv.epochs`` = ``train.epochs``, every batch). Writes one JSON with, per
variant: the pooled ROC-AUC / clip F1 / balanced accuracy of every method with its
site-bootstrap interval, the paired CNN-minus-best-baseline difference, and the CNN's inner-val
F1 per epoch in every fold (does it still peak at epoch 1?).

    python benchmarks/studies/cv_recipe.py [--variants base,level_none,...] [--folds 5] \
        [--source MANIFEST] [--out benchmarks/results/cv_recipe.json]

CPU, 2 cores: about 5-8 minutes per variant on the default scenario.

Figures: docs/results/grouped-cv.md, docs/results/recipe.md.
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
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"

# name -> (why, params overrides as dotted keys); each states the physical reason it might help
NO_HEAD = {"model.level_input": False}
PRETRAINED = "@pretrained"  # replaced by the network `pretrain()` trains
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
                 {**NO_HEAD, "train.monitor": "val/clip_roc_auc"}),
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
    "tonal5": ("convs see the spectrum after a median over 5 mel bands: site tones (pumps, "
               "machines, hum) vanish, the broadband leak envelope stays",
               {"model.tonal_median": 5}),
    "tonal9": ("as tonal5 over 9 mel bands (wider lines and harmonic clusters removed)",
               {"model.tonal_median": 9}),
    "loss_monitor": ("early stopping on val loss: smooth where val F1 on 2-3 sites ties, so the "
                     "curve shows when the network starts to memorise",
                     {"train.monitor": "val/loss"}),
    "loss_lr": ("val-loss early stopping + a 4x lower learning rate",
                {"train.monitor": "val/loss", "train.learning_rate": 0.0005}),
    "tf_long": ("each segment a 0.25 s time-frequency patch (7 STFT frames of 512) instead of "
                "one 62.5 ms frame: the convs average a stationary leak's spectrum over 7 frames "
                "instead of voting on single noisy periodograms; batch 64 patches = the same "
                "audio per step as 512 frames",
                {"build.short_window": 2048, "build.short_hop": 2048, "build.hop_length": 256,
                 "train.batch_size": 64}),
    "mix_all": ("every training segment power-summed with a non-leak segment of another file "
                "at 0-10 dB below it: each example carries two sites' backgrounds, so a site's "
                "own background stops identifying its label (virtual sites from the real ones)",
                {"train.augment.mix_prob": 1.0, "train.augment.mix_snr_max_db": 10.0}),
    "pretrain": ("synthetic pretraining on many other sites (--pretrain-sites), then "
                 "fine-tuning on the fold's sites: features learnt where no single site can be "
                 "memorised",
                 {"train.init_checkpoint": PRETRAINED, "train.reset_optimizer": True}),
    "pretrain_lr": ("synthetic pretraining, fine-tuned with a 4x lower learning rate",
                    {"train.init_checkpoint": PRETRAINED, "train.reset_optimizer": True,
                     "train.learning_rate": 0.0005}),
}


def set_key(params: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = params
    for key in parents:
        node = node[key]
    if leaf not in node:
        raise KeyError(f"params has no key {dotted}")
    node[leaf] = value


def variant_params(base: Path, overrides: dict[str, Any], folder: Path,
                   pretrained: Path | None = None) -> Path:
    params = yaml.safe_load(base.read_text())
    params["cv"].update(epochs=params["train"]["epochs"], train_fraction=1.0)
    params["build"]["clips_per_recording"] = "all"
    params["build"]["on_error"] = "skip"
    for key, value in overrides.items():
        if value == PRETRAINED:
            if pretrained is None:
                raise SystemExit("a pretrain variant needs --pretrain-sites")
            value = str(pretrained)
        set_key(params, key, value)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def render_scenario(folder: Path, seed: int | None) -> Path:
    cmd = [sys.executable, "-m", "leakpipe.cli", "synth", "--scenario", "small_network",
           "--out", str(folder)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder.parent / 'mlflow.db'}"}
    subprocess.run(cmd, check=True, cwd=REPO, env=env)   # its run in the scratch store
    return folder / "manifest.csv"


def pretrain(folder: Path, params: Path, sites: int, seed: int) -> Path:
    """Render another small network of ``sites`` sites (its own seed, so no site is shared with
    the scenario under test), build it with the params' build section and train the default
    network on it; returns the network file. Kept in ``folder`` and reused."""
    model = folder / "model.pt"
    if model.is_file():
        return model
    folder.mkdir(parents=True, exist_ok=True)
    run = [sys.executable, "-m", "leakpipe.cli"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}
    base = yaml.safe_load(params.read_text())
    base["build"].update(clips_per_recording="all", on_error="skip")
    own = folder / "params.yaml"
    own.write_text(yaml.safe_dump(base, sort_keys=False))
    subprocess.run(run + ["synth", "--scenario", "small_network", "--seed", str(seed),
                          "--network-sites", str(sites), "--out", str(folder / "audio"),
                          "--no-progress"], check=True, cwd=REPO)
    subprocess.run(run + ["build", "--params", str(own), "--source",
                          str(folder / "audio" / "manifest.csv"), "--out-dir",
                          str(folder / "data"), "--report", str(folder / "build.json"),
                          "--no-progress"], check=True, cwd=REPO, env=env)
    subprocess.run(run + ["train", "--params", str(own), "--train", str(folder / "data/train.h5"),
                          "--val", str(folder / "data/val.h5"), "--unvalidated",
                          "--model", str(model), "--metrics", str(folder / "train.json"),
                          "--plots", str(folder / "history.csv"), "--checkpoints",
                          str(folder / "checkpoints"), "--no-progress"],
                   check=True, cwd=REPO, env=env)
    return model


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
    figures = ("roc_auc", "clip_f1", "balanced_accuracy")
    return {"seconds": time.perf_counter() - start,
            "methods": {m: {f: {k: v[f][k] for k in ("mean", "ci_low", "ci_high")}
                            for f in figures} for m, v in summary["methods"].items()},
            "paired": summary.get("paired"), "sites": summary["sites"],
            "recordings": summary["recordings"], "clips": summary["clips"],
            "cnn_monitor": monitor, "cnn_val_per_epoch": histories,
            "cnn_best_epochs": [best_epoch(h, monitor) for h in histories if h]}


def best_epoch(history: list[float | None], monitor: str) -> int:
    """1-based epoch early stopping kept: the lowest loss, else the highest score."""
    sign = -1.0 if monitor.endswith("loss") else 1.0
    return 1 + max(range(len(history)),
                   key=lambda i: -math.inf if history[i] is None else sign * history[i])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated subset of {', '.join(VARIANTS)}")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--source", type=Path, default=None,
                        help="recordings to use instead of the rendered scenario")
    parser.add_argument("--seed", type=int, default=None, help="scenario seed")
    parser.add_argument("--pretrain-sites", type=int, default=None,
                        help="pretrain variants: sites of the synthetic network pretrained on")
    parser.add_argument("--pretrain-seed", type=int, default=777,
                        help="scenario seed of the pretraining network")
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
    pretrained = (pretrain(work / "pretrain", args.params, args.pretrain_sites,
                           args.pretrain_seed) if args.pretrain_sites else None)
    if pretrained is not None:
        report["pretrain"] = {"sites": args.pretrain_sites, "seed": args.pretrain_seed,
                              "train": json.loads((work / "pretrain/train.json").read_text())}
    for name in args.variants.split(","):
        why, overrides = VARIANTS[name]
        folder = work / name
        folder.mkdir(exist_ok=True)
        params = variant_params(args.params, overrides, folder, pretrained)
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
