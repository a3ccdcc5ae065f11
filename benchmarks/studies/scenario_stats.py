"""Where the small-network scenario keeps its evidence: whole-recording level statistics
against 3 s clip spectra, by grouped cross-validation.

Renders the small-network scenario (docs/synth.md#the-small-network-scenario) at each seed
into a scratch folder, then computes two feature sets from the WAVs alone:

- per whole recording (DC removed): the short-time level (dB, 0.125 s frames) and its p5, p10,
  p50, p90, p90 - p10 and standard deviation, broadband and in every octave band below the
  recording's Nyquist (what a noise logger's night statistics are);
- per 3 s clip: the mean over its 0.125 s frames of the log power in 16 log-spaced bands (what
  a clip classifier's mean spectrum sees), for the build's default 2 clips (first and last 3 s)
  and for every non-overlapping clip.

Each set is ranked by a standardised L2 logistic regression (C = 1) over grouped (site),
class-stratified 5-fold CV, 10 fold draws; a clip model's recording score is the mean of its
clips' probabilities. The folds are drawn over recordings, the same for every feature set.

    python benchmarks/studies/scenario_stats.py --label after [--seeds 20250333,1] [--sites 30]
        [--out benchmarks/results/scenario_stats.json]

Each run replaces its ``--label`` entry in the JSON and keeps the others (``before``: the
scenario as it was before the intermittent backgrounds; ``after``: as it is now).
CPU, 2 cores: under a minute a seed.

Figures: docs/results/synthetic-data.md, docs/synth.md.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedGroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from leakpipe.audio.network import generate_network
from leakpipe.config import load_section
from leakpipe.constants import LEAK_CLASS, MANIFEST_NAME

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
FRAME_S = 0.125              # short-time level frame, s
PERCENTILES = (5, 10, 50, 90)
OCTAVE_LOW_HZ = 16.0         # lowest octave band's lower edge; bands double up to Nyquist
CLIP_S = 3.0
CLIP_BANDS = 16              # log-spaced bands of a clip's mean spectrum, OCTAVE_LOW_HZ..Nyquist
FOLDS = 5
FOLD_DRAWS = 10
C = 1.0
EPS = 1e-20


def frame_power(x: np.ndarray, sr: int) -> tuple[np.ndarray, np.ndarray]:
    """Hann-windowed power spectra of non-overlapping FRAME_S frames: (frames, bins), freqs."""
    n = int(round(FRAME_S * sr))
    frames = x[: x.size // n * n].reshape(-1, n)
    window = np.hanning(n)
    spec = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2 / np.sum(window**2)
    return spec, np.fft.rfftfreq(n, 1.0 / sr)


def octave_edges(sr: int) -> np.ndarray:
    edges = [OCTAVE_LOW_HZ]
    while edges[-1] * 2.0 <= sr / 2.0:
        edges.append(edges[-1] * 2.0)
    return np.array(edges)


def band_levels(spec: np.ndarray, freqs: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Level (dB) per frame in each band [edges[i], edges[i+1]): (frames, bands)."""
    out = [spec[:, (freqs >= lo) & (freqs < hi)].sum(axis=1)
           for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return 10.0 * np.log10(np.stack(out, axis=1) + EPS)


def level_stats(levels: np.ndarray) -> list[float]:
    """p5, p10, p50, p90, p90 - p10, std of a short-time level series."""
    p = np.percentile(levels, PERCENTILES)
    return [*p, p[3] - p[1], float(np.std(levels))]


def recording_stats(x: np.ndarray, sr: int) -> np.ndarray:
    """The recording's level statistics, broadband then per octave band."""
    n = int(round(FRAME_S * sr))
    frames = x[: x.size // n * n].reshape(-1, n)
    broadband = 10.0 * np.log10(np.mean(frames**2, axis=1) + EPS)
    spec, freqs = frame_power(x, sr)
    bands = band_levels(spec, freqs, octave_edges(sr))
    return np.array(level_stats(broadband) + [v for b in bands.T for v in level_stats(b)])


def clip_spectra(x: np.ndarray, sr: int, n_clips: int | None) -> np.ndarray:
    """Mean log band power of each clip: (clips, CLIP_BANDS); first and last 3 s when
    ``n_clips`` is 2, every non-overlapping clip when None."""
    n = int(round(CLIP_S * sr))
    starts = [0, x.size - n] if n_clips == 2 else list(range(0, x.size - n + 1, n))
    edges = np.geomspace(OCTAVE_LOW_HZ, sr / 2.0, CLIP_BANDS + 1)
    out = []
    for start in starts:
        spec, freqs = frame_power(x[start:start + n], sr)
        out.append(band_levels(spec, freqs, edges).mean(axis=0))
    return np.array(out)


@dataclasses.dataclass
class Recordings:
    stats: np.ndarray            # (recordings, features)
    rms_db: np.ndarray           # (recordings,) the whole recording's RMS level, dB
    clips2: list[np.ndarray]     # per recording (2, CLIP_BANDS)
    clips_all: list[np.ndarray]  # per recording (clips, CLIP_BANDS)
    labels: np.ndarray           # 1 = LEAK
    groups: np.ndarray           # site


def load(root: Path) -> Recordings:
    with open(root / MANIFEST_NAME, newline="") as fh:
        rows = list(csv.DictReader(fh))
    stats, rms, clips2, clips_all = [], [], [], []
    for row in rows:
        x, sr = sf.read(root / row["path"], dtype="float64")
        x = x - x.mean()                                   # the logger's DC offset
        stats.append(recording_stats(x, sr))
        rms.append(10.0 * np.log10(np.mean(x**2) + EPS))
        clips2.append(clip_spectra(x, sr, 2))
        clips_all.append(clip_spectra(x, sr, None))
    return Recordings(np.array(stats), np.array(rms), clips2, clips_all,
                      np.array([r["class"] == LEAK_CLASS for r in rows], dtype=int),
                      np.array([r["group"] for r in rows]))


def model() -> Any:
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000))


def oof_scores(recs: Recordings, features: np.ndarray | list[np.ndarray],
               draw: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Out-of-fold recording scores (and clip scores, clip labels) of one fold draw.

    ``features`` is a (recordings, k) matrix or a list of per-recording (clips, k) matrices.
    """
    folds = StratifiedGroupKFold(FOLDS, shuffle=True, random_state=draw)
    rec_score = np.zeros(len(recs.labels))
    clip_score, clip_label = [], []
    for train, test in folds.split(np.zeros(len(recs.labels)), recs.labels, recs.groups):
        if isinstance(features, np.ndarray):
            fit = model().fit(features[train], recs.labels[train])
            rec_score[test] = fit.predict_proba(features[test])[:, 1]
            continue
        x = np.concatenate([features[i] for i in train])
        y = np.concatenate([[recs.labels[i]] * len(features[i]) for i in train])
        fit = model().fit(x, y)
        for i in test:
            p = fit.predict_proba(features[i])[:, 1]
            rec_score[i] = p.mean()
            clip_score.extend(p)
            clip_label.extend([recs.labels[i]] * len(p))
    return rec_score, np.array(clip_score), np.array(clip_label)


def summary(values: list[float]) -> dict[str, Any]:
    return {"mean": round(float(np.mean(values)), 3), "min": round(float(np.min(values)), 3),
            "max": round(float(np.max(values)), 3)}


def evaluate(recs: Recordings) -> dict[str, Any]:
    """Pooled out-of-fold ROC-AUC of every feature set over FOLD_DRAWS fold draws."""
    n_stats = len(level_stats(np.zeros(2)))
    spread_cols = [i for i in range(recs.stats.shape[1]) if i % n_stats >= 4]
    sets: dict[str, np.ndarray | list[np.ndarray]] = {
        "recording_stats": recs.stats,
        "recording_spreads": recs.stats[:, spread_cols],      # gain-free: p90-p10, std
        "recording_p10": recs.stats[:, 1::n_stats],           # low percentile per band
        "recording_rms_level": recs.rms_db[:, None],          # loudness alone
        "clips_first_last": recs.clips2,
        "clips_all": recs.clips_all,
        "clip_level": [c.mean(axis=1, keepdims=True) for c in recs.clips2],
        "clip_shape": [c - c.mean(axis=1, keepdims=True) for c in recs.clips2],
    }
    out: dict[str, Any] = {}
    for name, features in sets.items():
        rec_auc, clip_auc = [], []
        for draw in range(FOLD_DRAWS):
            rec, clip, clip_y = oof_scores(recs, features, draw)
            rec_auc.append(roc_auc_score(recs.labels, rec))
            if clip.size:
                clip_auc.append(roc_auc_score(clip_y, clip))
        out[name] = {"recording_roc_auc": summary(rec_auc)}
        if clip_auc:
            out[name]["clip_roc_auc"] = summary(clip_auc)
    return out


def spread_by_class(recs: Recordings) -> dict[str, float]:
    """Mean broadband p90 - p10 (dB) of LEAK and NOLEAK recordings."""
    spread = recs.stats[:, 4]
    return {"LEAK": round(float(spread[recs.labels == 1].mean()), 2),
            "NOLEAK": round(float(spread[recs.labels == 0].mean()), 2)}


def run_seed(params: Path, seed: int, sites: int, scratch: Path) -> dict[str, Any]:
    cfg = dataclasses.replace(load_section(params, "synth"), scenario="small_network",
                              seed=seed, network_sites=sites, workers=2)
    start = time.perf_counter()
    generate_network(cfg, scratch / f"net{seed}", progress=False)
    recs = load(scratch / f"net{seed}")
    result = {"n_recordings": int(recs.labels.size), "n_leak": int(recs.labels.sum()),
              "n_sites": int(np.unique(recs.groups).size),
              "n_leak_sites": int(np.unique(recs.groups[recs.labels == 1]).size),
              "broadband_p90_minus_p10_db": spread_by_class(recs),
              "methods": evaluate(recs)}
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="entry of the JSON this run replaces")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--seeds", default="20250333,1", help="scenario seeds, comma-separated")
    parser.add_argument("--sites", type=int, default=30)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scenario_stats.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results["recipe"] = {"frame_s": FRAME_S, "percentiles": list(PERCENTILES),
                         "octave_low_hz": OCTAVE_LOW_HZ, "clip_s": CLIP_S,
                         "clip_bands": CLIP_BANDS, "folds": FOLDS, "fold_draws": FOLD_DRAWS,
                         "logistic_c": C, "sites": args.sites}
    with tempfile.TemporaryDirectory(prefix="scenario_stats_") as tmp:
        runs = {seed: run_seed(args.params, int(seed), args.sites, Path(tmp))
                for seed in args.seeds.split(",")}
    results.setdefault("runs", {})[args.label] = runs
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for seed, r in runs.items():
        m = r["methods"]
        print(f"{args.label} seed {seed}: {r['n_recordings']} recordings, {r['n_sites']} sites; "
              f"stats {m['recording_stats']['recording_roc_auc']['mean']}, "
              f"clips(2) {m['clips_first_last']['recording_roc_auc']['mean']}, "
              f"clips(all) {m['clips_all']['recording_roc_auc']['mean']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
