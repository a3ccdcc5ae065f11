"""Zero-shot sim-to-real of `logger_stats`: fitted on the default benchmark's train and val
splits (C by grouped inner CV over them, the threshold on their out-of-fold scores, as `ship`
does), applied unchanged to the five real
hydrophone recordings of ``../shared/real-dev`` (one PVC testbed, four leak types and one
no-leak recording; CC BY 4.0, see its README). Never trained on them.

Five recordings of one site say little (the ROC-AUC rests on 4 leak / no-leak pairs): a check
that the statistics carry over from the synthetic networks to a real pipe, not a figure of
merit. A clone without ``../shared/real-dev`` says so and writes nothing.

    python benchmarks/studies/stats_sim_to_real.py [--data-dir data/processed] \
        [--out benchmarks/results/stats_sim_to_real.json]

Figures: docs/results/recording-level.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from leakpipe.baselines import logger_stats as ls
from leakpipe.config import load_section
from leakpipe.evaluate.figures import ranking_metrics
from leakpipe.features.recording_stats import recording_stats

REPO = Path(__file__).resolve().parents[2]
REAL = REPO.parent / "shared" / "real-dev"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=REPO / "data" / "processed")
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "stats_sim_to_real.json")
    args = parser.parse_args(argv)
    if not REAL.is_dir():
        print(f"{REAL}: not here (a user's clone has no ../shared); nothing measured")
        return 0
    tables = {s: ls.read_recordings(args.data_dir / f"{s}.h5") for s in ("train", "val")}
    fit = ls.fit_and_select(tables["train"], tables["val"],
                            load_section(args.params, "baselines").logger_stats,
                            load_section(args.params, "evaluate"),
                            load_section(args.params, "decision"))
    spec = load_section(args.params, "build").stats
    rows, truth, scores = [], [], []
    for path in sorted(REAL.glob("*/*.wav")):
        samples, rate = sf.read(path, dtype="float32")
        stats = recording_stats(samples, rate, spec)
        score = float(ls.leak_probability(fit.net, stats[None, fit.used])[0])
        leak = path.parent.name == "LEAK"
        rows.append({"recording": f"{path.parent.name}/{path.name}", "sample_rate": rate,
                     "score": round(score, 4),
                     "decision": "LEAK" if score >= fit.point.threshold else "NOLEAK"})
        truth.append(leak)
        scores.append(score)
    truth_a, scores_a = np.asarray(truth), np.asarray(scores)
    report = {
        "detector": {"kind": "logger_stats", "C": fit.c, "threshold": fit.point.threshold,
                     "trained_on": str(args.data_dir / "train.h5")},
        "recordings": rows,
        "roc_auc": ranking_metrics(truth_a, scores_a)["roc_auc"],
        "leaks_called_leak": int(sum(r["decision"] == "LEAK" for r, t in zip(rows, truth,
                                                                            strict=True) if t)),
        "leaks": int(truth_a.sum()), "noleak_called_leak": int(sum(
            r["decision"] == "LEAK" for r, t in zip(rows, truth, strict=True) if not t)),
        "noleaks": int((~truth_a).sum()),
        "note": "one testbed, one sensor, one no-leak recording: 4 pairs behind the ROC-AUC"}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("roc_auc", "leaks_called_leak", "leaks",
                                             "noleak_called_leak", "noleaks")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
