"""Build throughput: recordings per second with 1 and 2 workers vs a naive per-file loop.

Imports happen before timing; the 2-worker figure includes starting the process pool (each
worker imports numpy / scipy once, ~2 s), so it pays off from a few thousand recordings on.
The naive baseline is what a first script does: per recording, load, resample, then for every
long segment and every short segment compute an STFT frame and its mel in Python. All three
runs process the same synthetic recordings in one invocation, so the ratios are comparable on a
shared, noisy machine.

    python benchmarks/bench_build.py [--recordings 2000] [--out benchmarks/results/build.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import get_window, resample_poly

import leakpipe.audio.io  # noqa: F401  (imported up front: scipy.signal costs ~1.5 s once)
from leakpipe.audio.synth import generate
from leakpipe.build import build
from leakpipe.config import BuildConfig, FeatureConfig, load_section
from leakpipe.data.manifest import discover
from leakpipe.features.mel import mel_filterbank

REPO = Path(__file__).resolve().parents[1]


def naive_recording(path: Path, f: FeatureConfig, n_clips: int) -> np.ndarray:
    """Per-file, per-segment Python loops: the baseline the build stage replaces."""
    x, sr = sf.read(path, dtype="float64")
    if x.ndim > 1:
        x = x.mean(axis=1)
    if sr != f.sample_rate:
        x = resample_poly(x, f.sample_rate, sr)
    n = f.clip_samples
    starts = np.linspace(0, max(len(x) - n, 0), n_clips).astype(int)
    window = get_window("hann", f.n_fft, fftbins=True)
    fb = mel_filterbank(f.sample_rate, f.n_fft, f.n_mels, f.fmin, f.fmax)
    out = np.zeros((n_clips, *f.segment_shape), dtype=np.float32)
    for c, start in enumerate(starts):
        clip = x[start:start + n]
        for i in range(f.n_long):
            long_seg = clip[i * f.long_hop:i * f.long_hop + f.long_window]
            for j in range(f.n_short):
                short = long_seg[j * f.short_hop:j * f.short_hop + f.short_window]
                for t in range(f.n_frames):
                    frame = short[t * f.hop_length:t * f.hop_length + f.n_fft] * window
                    power = np.abs(np.fft.rfft(frame)) ** f.power
                    mel = fb @ power
                    out[c, i, j, :, t] = 10 * 2 / f.power * np.log10(np.maximum(mel,
                                                                               f.log_floor))
    return out


def time_naive(cfg: BuildConfig, source: Path) -> tuple[float, int]:
    recordings = discover(source)
    start = time.perf_counter()
    for rec in recordings:
        naive_recording(rec.path, cfg.features, cfg.clips_per_recording)
    return time.perf_counter() - start, len(recordings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", type=int, default=2000,
                        help="approximate number of synthetic recordings")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "build.json")
    args = parser.parse_args()
    synth = load_section(REPO / "params.yaml", "synth")
    cfg = load_section(REPO / "params.yaml", "build")
    per_site = max(1, args.recordings // (synth.n_sites * len(synth.classes)))
    synth = dataclasses.replace(synth, recordings_per_class=per_site, scale=1.0)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        generate(synth, raw, progress=False)
        n = len(discover(raw))
        for workers in (1, 2):
            start = time.perf_counter()
            build(dataclasses.replace(cfg, workers=workers), raw, Path(tmp) / f"w{workers}",
                  progress=False)
            results[f"leakpipe_{workers}_workers"] = n / (time.perf_counter() - start)
        seconds, count = time_naive(cfg, raw)
        results["naive_loop"] = count / seconds
    base = results["naive_loop"]
    summary = {"recordings": n, "recordings_per_s": {k: round(v, 2) for k, v in results.items()},
               "speedup_vs_naive": {k: round(v / base, 2) for k, v in results.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{'method':<22}{'rec/s':>10}{'x naive':>10}")
    for name, rate in results.items():
        print(f"{name:<22}{rate:>10.1f}{rate / base:>10.1f}")


if __name__ == "__main__":
    main()
