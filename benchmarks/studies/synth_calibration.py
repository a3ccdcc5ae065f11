"""Calibration check of the synthetic benchmark against real hydrophone recordings.

Two questions, answered with the pipeline's own features (every recording resampled to
`build.sample_rate`, cut into 3 s clips, two-stage segmented, 64-band log-mel):

1. Does the synthetic spectrum look like the real one? For each recording, the mean log-mel
   over all its short segments with the recording's own level removed (its mean over bands
   subtracted), averaged per class: synthetic LEAK / non-leak (all sites, and the hydrophone
   sites on plastic pipes, which is what the real set is), and `real-dev` LEAK / NOLEAK. Also
   the leak signature, LEAK minus non-leak, of each.
2. Are there shortcuts? The clip's overall level alone (mean log-mel) as a score, and a
   16-MFCC-mean logistic regression over grouped (site) folds: the first must be near chance,
   the second is a floor the CNN has to clear.

    python benchmarks/studies/synth_calibration.py [--params params.yaml] [--sites 20]
        [--real-dir ../shared/real-dev] [--out benchmarks/results/synth_calibration.json]
        [--figure docs/figures/synth_calibration.png]

Without `../shared/real-dev` (a user's clone), the real-data curves are skipped with a message.

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

import numpy as np
from scipy.fft import dct
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from leakpipe.audio.clips import make_clips
from leakpipe.audio.io import read_audio
from leakpipe.audio.resampling import resample
from leakpipe.audio.synth import generate
from leakpipe.config import FeatureConfig, load_section
from leakpipe.constants import LEAK_CLASS, MANIFEST_NAME
from leakpipe.features.mel import band_centers_hz, clip_features

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
CLIPS_PER_RECORDING = 2
N_MFCC = 16


def recording_mel(path: Path, features: FeatureConfig, n_clips: int | None) -> np.ndarray:
    """Log-mel of every short segment of a recording's clips: (clips, long, short, mels)."""
    x, sr = read_audio(path)
    x = resample(x, sr, features.sample_rate)
    clips = make_clips(x, int(round(features.clip_s * features.sample_rate)), n_clips, 0.5)
    return clip_features(clips, features)[..., 0]


def level_removed(mel: np.ndarray) -> np.ndarray:
    """A recording's mean spectrum with its own level taken away: (mels,)."""
    spectrum = mel.reshape(-1, mel.shape[-1]).mean(axis=0)
    return spectrum - spectrum.mean()


def mfcc_mean(mel: np.ndarray) -> np.ndarray:
    """16 MFCCs (DCT-II of each log-mel vector) averaged over a clip: (clips, 16)."""
    c = dct(mel, type=2, norm="ortho", axis=-1)[..., :N_MFCC]
    return c.reshape(c.shape[0], -1, N_MFCC).mean(axis=1)


@dataclasses.dataclass
class Corpus:
    """Per recording: class, site, sensor, material, level-removed spectrum; per clip: level,
    MFCC mean, label, site."""

    spectra: list[np.ndarray] = dataclasses.field(default_factory=list)
    classes: list[str] = dataclasses.field(default_factory=list)
    kinds: list[str] = dataclasses.field(default_factory=list)   # "<sensor>/<material>"
    clip_level: list[float] = dataclasses.field(default_factory=list)
    clip_mfcc: list[np.ndarray] = dataclasses.field(default_factory=list)
    clip_label: list[int] = dataclasses.field(default_factory=list)
    clip_group: list[str] = dataclasses.field(default_factory=list)

    def add(self, mel: np.ndarray, cls: str, kind: str, group: str) -> None:
        self.spectra.append(level_removed(mel))
        self.classes.append(cls)
        self.kinds.append(kind)
        self.clip_level.extend(mel.mean(axis=(1, 2, 3)).tolist())
        self.clip_mfcc.extend(mfcc_mean(mel))
        self.clip_label.extend([int(cls == LEAK_CLASS)] * len(mel))
        self.clip_group.extend([group] * len(mel))


def synthetic_corpus(params: Path, sites: int, features: FeatureConfig) -> Corpus:
    cfg = dataclasses.replace(load_section(params, "synth"), n_sites=sites)
    corpus = Corpus()
    with tempfile.TemporaryDirectory() as tmp:
        generate(cfg, Path(tmp) / "raw", progress=False)
        with open(Path(tmp) / "raw" / MANIFEST_NAME, newline="") as fh:
            for row in csv.DictReader(fh):
                mel = recording_mel(Path(tmp) / "raw" / row["path"], features,
                                    CLIPS_PER_RECORDING)
                corpus.add(mel, row["class"], f"{row['sensor']}/{row['material']}", row["group"])
    return corpus


def real_corpus(real_dir: Path, features: FeatureConfig) -> Corpus:
    corpus = Corpus()
    for path in sorted(real_dir.glob("*/*.wav")):
        corpus.add(recording_mel(path, features, None), path.parent.name, "hydrophone/plastic",
                   path.stem)
    return corpus


def class_mean(corpus: Corpus, leak: bool, kind: str | None = None) -> list[float] | None:
    rows = [s for s, c, k in zip(corpus.spectra, corpus.classes, corpus.kinds, strict=True)
            if (c == LEAK_CLASS) == leak and (kind is None or k == kind)]
    return np.mean(rows, axis=0).round(2).tolist() if rows else None


def shortcut_aucs(corpus: Corpus, folds: int = 4) -> dict[str, float]:
    """Level-only AUC (as a score, no fitting) and a grouped-CV 16-MFCC-mean logistic AUC."""
    y = np.array(corpus.clip_label)
    level = np.array(corpus.clip_level)
    mfcc, groups = np.stack(corpus.clip_mfcc), np.array(corpus.clip_group)
    prob = np.zeros(len(y))
    for train, test in GroupKFold(n_splits=folds).split(mfcc, y, groups):
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        prob[test] = model.fit(mfcc[train], y[train]).predict_proba(mfcc[test])[:, 1]
    level_auc = float(roc_auc_score(y, level))
    return {"level_auc": round(level_auc, 3),
            "level_auc_either_sign": round(max(level_auc, 1 - level_auc), 3),
            "mfcc_mean_logreg_auc": round(float(roc_auc_score(y, prob)), 3),
            "clips": int(len(y)), "leak_clips": int(y.sum())}


def plot(result: dict, centres: np.ndarray, figure: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = result["spectra"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    styles = {"synthetic LEAK": ("tab:red", "-"), "synthetic non-leak": ("tab:blue", "-"),
              "synthetic hydrophone/plastic LEAK": ("tab:red", ":"),
              "synthetic hydrophone/plastic non-leak": ("tab:blue", ":"),
              "real-dev LEAK": ("darkred", "--"), "real-dev NOLEAK": ("navy", "--")}
    for name, (colour, style) in styles.items():
        if curves.get(name) is not None:
            top.plot(centres, curves[name], color=colour, linestyle=style, label=name)
    top.set_ylabel("mean log-mel, level removed (dB)")
    top.legend(fontsize=7)
    top.set_title("Average spectra: synthetic benchmark vs real-dev (hydrophone, PVC)")
    for name, colour in (("synthetic", "tab:green"), ("synthetic hydrophone/plastic", "olive"),
                         ("real-dev", "black")):
        diff = result["leak_signature"].get(name)
        if diff is not None:
            bottom.plot(centres, diff, color=colour, label=f"{name}: LEAK - non-leak")
    bottom.axhline(0.0, color="grey", linewidth=0.5)
    bottom.set_xscale("log")
    bottom.set_xlabel("mel band centre (Hz)")
    bottom.set_ylabel("dB")
    bottom.legend(fontsize=7)
    fig.tight_layout()
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)
    plt.close(fig)


def signature(a: list[float] | None, b: list[float] | None) -> list[float] | None:
    return None if a is None or b is None else (np.array(a) - np.array(b)).round(2).tolist()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--sites", type=int, default=20, help="synthetic sites to generate")
    parser.add_argument("--real-dir", type=Path, default=ROOT.parent / "shared" / "real-dev")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks" / "results" / "synth_calibration.json")
    parser.add_argument("--figure", type=Path,
                        default=ROOT / "docs" / "figures" / "synth_calibration.png")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    features = load_section(args.params, "build").features
    start = time.perf_counter()
    synth = synthetic_corpus(args.params, args.sites, features)
    hp = "hydrophone/plastic"
    curves = {"synthetic LEAK": class_mean(synth, True),
              "synthetic non-leak": class_mean(synth, False),
              f"synthetic {hp} LEAK": class_mean(synth, True, hp),
              f"synthetic {hp} non-leak": class_mean(synth, False, hp)}
    real = None
    if args.real_dir.is_dir():
        real = real_corpus(args.real_dir, features)
        curves["real-dev LEAK"] = class_mean(real, True)
        curves["real-dev NOLEAK"] = class_mean(real, False)
    else:
        print(f"no real recordings at {args.real_dir}: real-data curves skipped")
    result = {
        "machine": "2-core CPU", "sites": args.sites, "seconds": None,
        "mel_centres_hz": band_centers_hz(features.n_mels, features.fmin,
                                          features.fmax).round(1).tolist(),
        "spectra": curves,
        "leak_signature": {
            "synthetic": signature(curves["synthetic LEAK"], curves["synthetic non-leak"]),
            f"synthetic {hp}": signature(curves[f"synthetic {hp} LEAK"],
                                         curves[f"synthetic {hp} non-leak"]),
            "real-dev": signature(curves.get("real-dev LEAK"), curves.get("real-dev NOLEAK"))},
        "shortcuts": shortcut_aucs(synth),
    }
    if real is not None:
        result["real_level_auc"] = round(float(roc_auc_score(real.clip_label,
                                                             real.clip_level)), 3)
    result["seconds"] = round(time.perf_counter() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, np.array(result["mel_centres_hz"]), args.figure)
    s = result["shortcuts"]
    print(f"synthetic ({args.sites} sites, {s['clips']} clips): level-only AUC "
          f"{s['level_auc']:.3f}, 16-MFCC-mean logistic AUC {s['mfcc_mean_logreg_auc']:.3f}; "
          f"{result['seconds']:.0f} s -> {args.out}, {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
