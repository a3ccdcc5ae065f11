"""Sim-to-real report: the synthetic detector on real recordings, and few-shot adaptation.

Reads the real recordings of ``--real-dir`` (``<root>/LEAK/*.wav``, ``<root>/NOLEAK/*.wav``;
by default ``../shared/real-dev``, five hydrophone recordings of one PVC testbed, which is not
part of the repository: without it this script says so and exits 0).

1. Zero-shot: every non-overlapping clip of every recording scored with the detector through
   `leakpipe predict`'s scoring path; per recording and overall ROC-AUC (clip bootstrap
   interval), balanced accuracy at the detector's own operating point, per-class quantiles.
2. Few-shot, leave one recording out: fine-tuned from the detector (``train.init_checkpoint``)
   and trained from scratch on the other recordings with the same budget, scored on the
   held-out one, against the detector alone on the same clips.

Method and caveats: docs/sim_to_real.md. CPU, 2 cores: a few minutes.

    python benchmarks/studies/sim_to_real.py [--detector models/detector.pt] \
        [--real-dir ../shared/real-dev] [--out benchmarks/results/sim_to_real.json] \
        [--figure benchmarks/results/sim_to_real.png] [--epochs 4] [--seed 0] [--seeds 5]
        [--no-few-shot]

Figures: docs/results/sim-to-real.md, docs/sim_to_real.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

from realcheck.fewshot import FewShotConfig
from realcheck.sim_to_real import RESAMPLES, sim_to_real, write_outputs

from leakpipe.config import load_section

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
DEFAULTS = FewShotConfig()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detector", type=Path, default=REPO / "models" / "detector.pt",
                        help="detector file (default: models/detector.pt, written by evaluate)")
    parser.add_argument("--real-dir", type=Path, default=REPO.parent / "shared" / "real-dev",
                        help="real recordings, <root>/LEAK/*.wav and <root>/NOLEAK/*.wav "
                             "(default: ../shared/real-dev)")
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml",
                        help="params whose `train` section the adaptation uses")
    parser.add_argument("--out", type=Path, default=RESULTS / "sim_to_real.json")
    parser.add_argument("--figure", type=Path, default=RESULTS / "sim_to_real.png")
    parser.add_argument("--epochs", type=int, default=DEFAULTS.epochs,
                        help=f"adaptation epochs per fold and method (default {DEFAULTS.epochs})")
    parser.add_argument("--finetune-lr", type=float, default=DEFAULTS.finetune_lr,
                        help="learning rate of fine-tuning (default: train.learning_rate, the "
                             "rate of training from scratch)")
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed,
                        help="training seed of every fold and the bootstrap seed")
    parser.add_argument("--seeds", type=int, default=1,
                        help="repeat the few-shot folds with this many training seeds from "
                             "--seed on and report the spread (default 1)")
    parser.add_argument("--resamples", type=int, default=RESAMPLES,
                        help="bootstrap resamples of the zero-shot ROC-AUC")
    parser.add_argument("--no-few-shot", action="store_true",
                        help="zero-shot figures only (seconds instead of minutes)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("leakpipe.train").setLevel(logging.WARNING)   # one line per fold is enough
    if not args.real_dir.is_dir():
        print(f"sim_to_real: no real recordings at {args.real_dir} (a clone without "
              "../shared/real-dev); nothing to do")
        return 0
    if not args.detector.is_file():
        print(f"sim_to_real: no detector at {args.detector}; run `dvc repro evaluate` first",
              file=sys.stderr)
        return 2
    cfg = None if args.no_few_shot else dataclasses.replace(
        DEFAULTS, epochs=args.epochs, finetune_lr=args.finetune_lr, seed=args.seed)
    summary = sim_to_real(args.detector, args.real_dir, load_section(args.params, "train"), cfg,
                          runtime=load_section(args.params, "runtime"),
                          decision=load_section(args.params, "decision"), params=args.params,
                          resamples=args.resamples, seeds=args.seeds)
    write_outputs(summary, args.out, args.figure)
    print(json.dumps(headline(summary), indent=2))
    return 0


def headline(summary: dict) -> dict:
    """The figures docs/results/sim-to-real.md quotes."""
    zero = summary["zero_shot"]["overall"]
    out = {"zero_shot": {k: zero[k] for k in ("roc_auc", "roc_auc_ci", "balanced_accuracy")}}
    if "few_shot" in summary:
        few = summary["few_shot"]
        out["few_shot_pooled"] = {m: {k: v[k] for k in ("roc_auc", "balanced_accuracy")}
                                  for m, v in few["pooled"].items()}
        out["new_leak_vs_background"] = {
            m: {k: v[k] for k in ("mean_roc_auc", "mean_balanced_accuracy")}
            for m, v in few["new_leak_vs_background"].items()}
        out["beats"] = few["beats"]
    if "few_shot_seeds" in summary:
        spread = summary["few_shot_seeds"]
        out["over_seeds"] = {"seeds": spread["seeds"], "finetune_wins": spread["finetune_wins"],
                             **{m: spread[m]["roc_auc"] for m in ("synthetic", "finetune",
                                                                  "scratch")}}
    return out


if __name__ == "__main__":
    sys.exit(main())
