"""Why did field adaptation do what it did? Each round's detector on the field check set with and
without the field machine noise, and the pool's pseudo-labels against its hidden truth.

Run after `dvc repro adapt` on the default data (it reads checkpoints/adapt, data/field and
params.yaml). With the default `adapt.check_guard: true` the field check set stops the first
round that hurts it; to see every round, adapt with the guard off first:

    dvc exp run -S adapt.check_guard=false          # or set it in params.yaml, dvc repro adapt
    .venv/bin/python benchmarks/studies/adapt_field.py      # -> benchmarks/results/adapt_field.json

A rejected round has no detector and makes no pseudo-labels: its row holds its status only.

1. The check set's recordings are rendered a second time WITHOUT the machine (the same
   recording, every other draw unchanged: ``render_field_recording(interfere=False)``). The
   false-positive rate of a round's detector on both versions says how much of it the machine
   causes.
2. For every round, the pool's pseudo-labels (from checkpoints/adapt/state.json) are compared
   with data/field/pool_truth.csv: wrong LEAK labels on non-leak recordings, by the machine's
   in-band SNR. Those are the labels whose most leak-like segments a round teaches as LEAK.
3. For the seed's wrong LEAK labels: how much of the machine the kept long segments hold
   against the dropped ones (the machine's share of each segment's energy, from the recording
   rendered with and without it).

Rates carry 95 % Wilson intervals (recordings are the unit; 10 field sites).

Figures: docs/results/adaptation.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from leakpipe.adapt.field import (  # noqa: E402
    FieldSet,
    check_recordings,
    load_field,
    read_truth,
    score_detector,
)
from leakpipe.adapt.pseudo import LEAK, select_segments  # noqa: E402
from leakpipe.adapt.rounds import set_figures  # noqa: E402
from leakpipe.audio.clips import plan_clips  # noqa: E402
from leakpipe.audio.field import CHECK_DIR, plan, render_config, render_field_recording  # noqa: E402
from leakpipe.config import load_section  # noqa: E402
from leakpipe.constants import LEAK_CLASS  # noqa: E402
from leakpipe.decision.metrics import wilson_interval  # noqa: E402
from leakpipe.detector import load_detector  # noqa: E402
from leakpipe.predict.rules import ScoringRules, batch_budget  # noqa: E402
from leakpipe.runtime import make_runtime  # noqa: E402

SNR_BINS = ((0.0, 5.0), (5.0, 10.0), (10.0, 15.01))


def rate(k: int, n: int) -> dict[str, object]:
    """k of n with its 95 % Wilson interval (leakpipe's ``wilson_interval``), rounded."""
    low, high = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": round(k / n, 3) if n else None,
            "ci95": [round(low, 3), round(high, 3)]}


def render_clean_check(params: Path, folder: Path) -> list[tuple[str, Path, int]]:
    """The check set's recordings without the machine, written like the field stage writes."""
    synth_cfg, field_cfg = load_section(params, "synth"), load_section(params, "field")
    cfg = render_config(synth_cfg, field_cfg)
    items = []
    for item in plan(synth_cfg, field_cfg):
        if item.pooled:
            continue
        rec = render_field_recording(cfg, field_cfg, item.site, item.machine, item.cls,
                                     item.index, interfere=False)
        path = folder / item.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, rec.samples, item.site.sample_rate, subtype=cfg.subtype, format="WAV")
        items.append((item.rel.removeprefix(f"{CHECK_DIR}/"), path, int(item.cls == LEAK_CLASS)))
    return items


def false_leaks(labels: dict[str, int | None], truth: dict[str, int],
                snr: dict[str, float]) -> dict[str, object]:
    """Wrong LEAK pseudo-labels on the pool's non-leak recordings, overall and by machine SNR."""
    negatives = [k for k, y in truth.items() if y == 0 and k in labels]
    out: dict[str, object] = {"all": rate(sum(labels[k] == 1 for k in negatives), len(negatives))}
    for low, high in SNR_BINS:
        keys = [k for k in negatives if low <= snr[k] < high]
        out[f"snr_{low:g}_{min(high, 15):g}_db"] = rate(sum(labels[k] == 1 for k in keys),
                                                        len(keys))
    leaks = [k for k, y in truth.items() if y == 1 and k in labels]
    out["leaks_labelled_leak"] = rate(sum(labels[k] == 1 for k in leaks), len(leaks))
    return out


def kept_machine_share(params: Path, seed_entry: dict, truth: dict[str, int], detector: object,
                       runtime: object, budget: int, min_fraction: float,
                       keep_fraction: float) -> dict[str, object]:
    """Machine share of the energy of kept vs dropped long segments of the seed's wrong LEAK
    pool labels (each recording rendered with and without the machine)."""
    synth_cfg, field_cfg = load_section(params, "synth"), load_section(params, "field")
    cfg = render_config(synth_cfg, field_cfg)
    f = detector.features  # type: ignore[attr-defined]
    wrong = {k for k, y in seed_entry["labels"].items() if y == LEAK and truth.get(k) == 0}
    kept_shares, dropped_shares = [], []
    for item in plan(synth_cfg, field_cfg):
        key = item.rel.split("/", 1)[1]
        if not item.pooled or key not in wrong:
            continue
        args = (cfg, field_cfg, item.site, item.machine, item.cls, item.index)
        full = render_field_recording(*args).samples.astype(np.float64)
        machine = full - render_field_recording(*args, interfere=False).samples
        sr = item.site.sample_rate
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "rec.wav"
            sf.write(path, full.astype(np.float32), sr, subtype="FLOAT")
            field: FieldSet = load_field([(key, path)], detector, min_fraction)  # type: ignore[arg-type]
        long_probs = score_detector(detector, field, runtime, budget).long_probs[0]  # type: ignore[arg-type]
        kept = set(select_segments(long_probs, LEAK, keep_fraction).tolist())
        clip_plan = plan_clips(len(full), sr, f, math.ceil(len(full) / sr * f.sample_rate
                                                            / f.clip_samples), min_fraction)
        starts = clip_plan.starts / f.sample_rate
        for i in range(len(long_probs)):
            t0 = starts[i // f.n_long] + (i % f.n_long) * f.long_hop / f.sample_rate
            a, b = int(t0 * sr), int((t0 + f.long_window_s) * sr)
            share = float(np.sum(machine[a:b] ** 2) / max(np.sum(full[a:b] ** 2), 1e-30))
            (kept_shares if i in kept else dropped_shares).append(share)
    return {"recordings": len(wrong),
            "kept_segments_machine_share_mean": round(float(np.mean(kept_shares)), 3),
            "dropped_segments_machine_share_mean": round(float(np.mean(dropped_shares)), 3),
            "kept_segments_machine_dominant": round(float(np.mean(np.array(kept_shares) > 0.5)), 3),
            "dropped_segments_machine_dominant": round(
                float(np.mean(np.array(dropped_shares) > 0.5)), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--work", type=Path, default=REPO / "checkpoints" / "adapt")
    parser.add_argument("--field", type=Path, default=REPO / "data" / "field")
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "adapt_field.json")
    args = parser.parse_args()
    state = json.loads((args.work / "state.json").read_text())
    seed = load_detector(args.work / "round-00" / "detector.pt")
    runtime = make_runtime("cpu", "off")
    min_fraction = load_section(args.params, "build").min_clip_fraction
    budget = batch_budget(seed, ScoringRules(seed.batch_limits, min_fraction), runtime)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as tmp:
        sets = {"with_machine": check_recordings(args.field / CHECK_DIR),
                "without_machine": render_clean_check(args.params, Path(tmp))}
        fields = {name: load_field([(k, p) for k, p, _ in items], seed, min_fraction,
                                   labels=[y for *_, y in items], desc=name)
                  for name, items in sets.items()}
    truth = read_truth(args.field / "pool_truth.csv")
    with (args.field / "pool_truth.csv").open(newline="") as handle:
        snr = {row["path"]: float(row["interference_snr_db"]) for row in csv.DictReader(handle)}
    rounds = []
    for entry in state["rounds"]:
        r = entry["round"]
        row: dict[str, object] = {"round": r, "status": entry["status"]}
        path = args.work / f"round-{r:02d}" / "detector.pt"
        if path.is_file():
            detector = load_detector(path)
            for name, field in fields.items():
                scores = score_detector(detector, field, runtime, budget)
                assert field.truth is not None
                decided = scores.scores >= detector.threshold
                neg, pos = field.truth == 0, field.truth == 1
                figures = set_figures(field.truth, scores.scores, detector.threshold)
                row[name] = {"fpr": rate(int(decided[neg].sum()), int(neg.sum())),
                             "sensitivity": rate(int(decided[pos].sum()), int(pos.sum())),
                             "roc_auc": round(figures["roc_auc"], 3)}
        if "labels" in entry:
            row["pool_false_leak_labels"] = false_leaks(entry["labels"], truth, snr)
        rounds.append(row)
        print(json.dumps(row))
    selection = kept_machine_share(args.params, state["rounds"][0], truth, seed, runtime, budget,
                                   min_fraction, load_section(args.params, "adapt").keep_fraction)
    print(json.dumps({"seed_wrong_leak_labels_kept_segments": selection}))
    args.out.write_text(json.dumps({"machine": "2-core CPU box (this repo's dev machine)",
                                    "rounds": rounds,
                                    "seed_wrong_leak_labels_kept_segments": selection},
                                   indent=1) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
