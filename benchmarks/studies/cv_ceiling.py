"""What the small-network scenario lets any method reach: every method trained on a 5x larger
rendering of the same scenario, scored on the very clips that grouped cross-validation scored.

Grouped CV of a 30-site network trains each fold's models on ~20 sites. Whether the CNN can
beat the best baseline there by more than the paired site-bootstrap interval (about +-0.06 to
+-0.1 ROC-AUC with 30 sites) depends on how far above the baseline's figure the scenario's
information reaches at all. This benchmark measures that reach: the CNN (train's `fit()` and
evaluate's rules) and every baseline are trained on another rendering of the scenario with
``--big-sites`` sites (its own seed, so no site is shared) and scored, unchanged, on all clips
of the scenario under test; the cross-validated figures of the same clips sit beside them, and
each method's gain from 5x the sites is paired on the same site draws.

    python benchmarks/studies/cv_ceiling.py [--seeds 20250333,1] [--big-sites 150] \
        [--out benchmarks/results/cv_ceiling.json]

CPU, 2 cores: about 6 minutes per scenario seed (the cross-validation dominates).

Figures: docs/crossval.md, docs/results/ceiling.md.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cv_recipe  # noqa: E402  (benchmarks/ is not a package)

from leakpipe.config.crossval import CNN_METHOD  # noqa: E402
from leakpipe.cv.data import pool_recordings, write_fold_split  # noqa: E402
from leakpipe.cv.methods import TEST, TRAIN, VAL, run_baselines  # noqa: E402
from leakpipe.cv.report import OutOfFold, point_figures, site_bootstrap  # noqa: E402
from leakpipe.cv.stage import load_settings  # noqa: E402
from leakpipe.data.reader import open_split  # noqa: E402
from leakpipe.detector import load_network  # noqa: E402
from leakpipe.evaluate.detector_evaluation import evaluate_detector  # noqa: E402
from leakpipe.preload import plan_training, read_shapes  # noqa: E402
from leakpipe.runtime import make_runtime  # noqa: E402

RESULTS = cv_recipe.RESULTS
FIGURES = ("roc_auc", "clip_f1", "balanced_accuracy")
BIG = "@big"       # suffix of a method trained on the big rendering


def pooled_split(data: Path, out: Path) -> Path:
    """All built clips of the scenario (train, val and test splits) as one split file."""
    recordings = pool_recordings([data / f"{s}.h5" for s in (TRAIN, VAL, TEST)])
    return write_fold_split(recordings, np.arange(len(recordings)), out, TEST)


def big_methods(params: Path, big: Path, network: Path, target: Path,
                methods: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each method trained on the big rendering (its val choosing hyper-parameters and
    thresholds) -> its scores and decisions on ``target``, in file order."""
    files = {TRAIN: big / "train.h5", VAL: big / "val.h5", TEST: target}
    settings = load_settings(params, None)
    shapes = read_shapes({TRAIN: files[TRAIN], VAL: files[VAL]})
    plan = plan_training(shapes, settings.preload)[0].to_dict(settings.preload, shapes)
    out = {}
    if CNN_METHOD in methods:
        rt = settings.runtime
        runtime = make_runtime(rt.device, rt.amp, rt.channels_last)
        ev = evaluate_detector(load_network(network), {VAL: files[VAL], TEST: target}, plan,
                               dataclasses.replace(settings.evaluate, bootstrap_resamples=0),
                               settings.decision, runtime)
        out[CNN_METHOD] = (np.asarray(ev.test.file_score, dtype=np.float64),
                           np.asarray(ev.test.decision, dtype=bool))
    for result in run_baselines(files, settings, tuple(m for m in methods if m != CNN_METHOD)):
        out[result.name] = (result.scores, result.decision)
    return out


def cv_table(predictions: Path) -> dict[tuple[str, int], dict[str, str]]:
    with predictions.open(newline="") as f:
        return {(row["recording_id"], int(row["clip"])): row for row in csv.DictReader(f)}


def compare(cv_rows: dict[tuple[str, int], dict[str, str]], target: Path,
            big: dict[str, tuple[np.ndarray, np.ndarray]], methods: tuple[str, ...],
            resamples: int, confidence: float) -> dict[str, Any]:
    """Pooled figures with site-bootstrap intervals of every method as cross-validated and as
    trained on the big rendering, on the same clips; the paired gain of each from 5x sites and
    the paired CNN-minus-rival differences under both."""
    with open_split(target) as split:
        keys = list(zip(split.recording_ids.tolist(),
                        np.asarray(split.h5["clip_index"][:]).astype(int).tolist(), strict=True))
        group, truth = split.groups, split.binary_labels.astype(bool)
    rows = [cv_rows[k] for k in keys]
    scores = {m: np.array([float(r[f"{m}_score"]) for r in rows]) for m in methods}
    decision = {m: np.array([r[f"{m}_leak"] == "1" for r in rows]) for m in methods}
    for m, (s, d) in big.items():
        scores[m + BIG], decision[m + BIG] = s, d
    fold = np.array([int(r["fold"]) for r in rows])

    def oof(pair: tuple[str, str]) -> OutOfFold:
        return OutOfFold(fold=fold, recording_id=np.array([k[0] for k in keys]), group=group,
                         clip=np.array([k[1] for k in keys]), truth=truth,
                         scores={CNN_METHOD: scores[pair[0]], "rival": scores[pair[1]]},
                         decision={CNN_METHOD: decision[pair[0]], "rival": decision[pair[1]]})

    def interval(pair: tuple[str, str]) -> dict[str, Any]:
        boot = site_bootstrap(oof(pair), resamples, confidence, 0, "rival")["paired"]
        a = point_figures(truth, decision[pair[0]], scores[pair[0]])
        b = point_figures(truth, decision[pair[1]], scores[pair[1]])
        return {f: {"mean": a[f] - b[f], "ci_low": boot[f].low, "ci_high": boot[f].high}
                for f in FIGURES}

    figures = {}
    for m in scores:
        boot = site_bootstrap(oof((m, m)), resamples, confidence, 0, None)["methods"][CNN_METHOD]
        point = point_figures(truth, decision[m], scores[m])
        figures[m] = {f: {"mean": point[f], "ci_low": boot[f].low, "ci_high": boot[f].high}
                      for f in FIGURES}
    rival_cv = max((m for m in methods if m != CNN_METHOD),
                   key=lambda m: figures[m]["roc_auc"]["mean"])
    rival_big = max((m + BIG for m in methods if m != CNN_METHOD and m + BIG in figures),
                    key=lambda m: figures[m]["roc_auc"]["mean"])
    paired = {f"{m}{BIG} - {m}": interval((m + BIG, m)) for m in methods if m + BIG in figures}
    paired[f"{CNN_METHOD} - {rival_cv}"] = interval((CNN_METHOD, rival_cv))
    paired[f"{CNN_METHOD}{BIG} - {rival_big}"] = interval((CNN_METHOD + BIG, rival_big))
    return {"sites": int(len(np.unique(group))), "recordings": len({k[0] for k in keys}),
            "clips": len(keys), "methods": figures, "paired": paired}


def run_seed(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    folder = work / f"seed-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    source = cv_recipe.render_scenario(folder / "scenario", seed)
    params = cv_recipe.variant_params(args.params, {}, folder)
    cv_out = folder / "cv"
    if not (cv_out / "cv.json").is_file():
        cv_recipe.run_variant("default", source, params, args.folds, cv_out)
    big = work / "big"                 # one big rendering serves every seed
    network = cv_recipe.pretrain(big, params, args.big_sites, args.big_seed)
    target = pooled_split(cv_out / "data", folder / "scenario.h5")
    summary = json.loads((cv_out / "cv.json").read_text())
    methods = tuple(summary["methods"])
    scored = big_methods(params, big / "data", network, target, methods)
    result = compare(cv_table(cv_out / "predictions.csv"), target, scored, methods,
                     args.resamples, 0.95)
    result["cv_json_check"] = {m: summary["methods"][m]["roc_auc"]["mean"] for m in methods}
    return result


def big_curve(big: Path) -> dict[str, Any]:
    """The big rendering's CNN: its val clip F1 and loss per epoch, and the epoch it kept."""
    with (big / "history.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    best = json.loads((big / "train.json").read_text())["best_epoch"]
    return {"cnn_val_clip_f1_per_epoch": [round(float(r["val/clip_f1"]), 3) for r in rows],
            "cnn_val_loss_per_epoch": [round(float(r["val/loss"]), 3) for r in rows],
            "cnn_best_epoch": int(best) + 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="20250333",
                        help="comma-separated scenario seeds (20250333 = synth.seed's default)")
    parser.add_argument("--big-sites", type=int, default=150)
    parser.add_argument("--big-seed", type=int, default=777)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--params", type=Path, default=cv_recipe.REPO / "params.yaml")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (kept)")
    parser.add_argument("--out", type=Path, default=RESULTS / "cv_ceiling.json")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="leakpipe-cv-ceiling-"))
    report: dict[str, Any] = {
        "note": __doc__.split("\n\n")[0].replace("\n", " "),
        "big": {"sites": args.big_sites, "seed": args.big_seed},
        "folds": args.folds, "machine": f"{os.cpu_count()} CPU cores, torch CPU",
        "seeds": {}}
    for seed in (int(s) for s in args.seeds.split(",")):
        report["seeds"][str(seed)] = run_seed(seed, args, work)
        report["big"].update(big_curve(work / "big"))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
        for m, f in report["seeds"][str(seed)]["methods"].items():
            r = f["roc_auc"]
            print(f"seed {seed} {m}: {r['mean']:.3f} ({r['ci_low']:.2f}-{r['ci_high']:.2f})",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
