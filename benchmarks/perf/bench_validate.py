"""Validation throughput (MB/s of HDF5 read) against a plain sequential h5py read, one run.

Writes a synthetic set of valid splits with the default feature shape (23, 7, 64, 1), then, in
one invocation and alternating, times a plain chunk-by-chunk read of every split's ``mel`` and
the full validation (structure, streamed summary, GX suite, cross-split checks). Both are timed
with a warm page cache (the CPU-bound worst case for validation) and with the files evicted
from the cache first (``posix_fadvise(DONTNEED)``: reads come from storage). Fixed costs are
measured apart: importing great-expectations in a fresh interpreter, and a validation of a tiny
set (GX context and suite set-up). Target: validation time <= plain read time / 0.6 + fixed.

    python benchmarks/perf/bench_validate.py [--mib 1024] [--repeat 3] [--workers N]
        [--out benchmarks/results/validate.json]

Figures: docs/results/performance.md, docs/validation.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

from leakpipe.config import FeatureConfig, ValidateConfig, load_section
from leakpipe.constants import KNOWN_CLASSES, SPLITS
from leakpipe.data.writer import SplitWriter
from leakpipe.validate.split_validation import validate_splits

REPO = Path(__file__).resolve().parents[2]
MB = 1e6
MIB = 2**20
TARGET_RATIO = 0.6
SPLIT_SHARES = {"train": 0.7, "val": 0.2, "test": 0.1}
CLIPS_PER_RECORDING = 2
MIN_RECORDINGS = 2   # recordings per class in every split (validate.min_recordings_per_class)
TINY_FILES = 40


def default_features() -> FeatureConfig:
    return load_section(REPO / "params.yaml", "build").features


def write_set(root: Path, total_mib: float, features: FeatureConfig, seed: int = 0) -> dict:
    """Valid splits of about ``total_mib`` MiB of float16 mel, balanced classes."""
    row_bytes = int(np.prod(features.segment_shape)) * 2
    smallest = len(KNOWN_CLASSES) * CLIPS_PER_RECORDING * MIN_RECORDINGS   # files per split
    files = max(smallest * 3, int(total_mib * MIB) // row_bytes)
    rng = np.random.default_rng(seed)
    paths = {}
    for split in SPLITS:
        n = max(smallest, int(files * SPLIT_SHARES[split]))
        paths[split] = root / f"{split}.h5"
        with SplitWriter(paths[split], split, features, KNOWN_CLASSES) as writer:
            for rec in range(n // CLIPS_PER_RECORDING):
                label = rec % len(KNOWN_CLASSES)
                mel = rng.uniform(-100, 40, (CLIPS_PER_RECORDING, *features.segment_shape))
                writer.append(mel.astype(np.float16), label, f"{split}/rec{rec}",
                              f"{split}-site{rec % 4}")
    return paths


def evict(paths: dict[str, Path]) -> None:
    """Drop the files from the page cache (no root needed) so the next read hits storage."""
    for path in paths.values():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def plain_read(paths: dict[str, Path]) -> int:
    """The baseline: every split's mel, one HDF5 chunk at a time, in file order."""
    total = 0
    for path in paths.values():
        with h5py.File(path, "r") as h5:
            mel = h5["mel"]
            step = mel.chunks[0]
            for start in range(0, mel.shape[0], step):
                total += mel[start:start + step].nbytes
    return total


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def import_seconds() -> float:
    """great-expectations + leakpipe.validate in a fresh interpreter, minus a bare start."""
    code = "import leakpipe.validate.suite as s; s.gx_module()"
    bare = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))
    full = timed(lambda: subprocess.run([sys.executable, "-c", code], check=True))
    return max(0.0, full - bare)


def validate(paths: dict[str, Path], cfg: ValidateConfig) -> None:
    report = validate_splits(paths, cfg, progress=False)
    if not report.passed:
        raise SystemExit(f"benchmark data failed validation: {report.failures[0].summary()}")


def measure(paths: dict[str, Path], cfg: ValidateConfig, repeat: int, cold: bool) -> dict:
    """Median seconds of the plain read and of validation, alternating."""
    reads, checks = [], []
    for _ in range(repeat):
        if cold:
            evict(paths)
        reads.append(timed(lambda: plain_read(paths)))
        if cold:
            evict(paths)
        checks.append(timed(lambda: validate(paths, cfg)))
    return {"read_s": statistics.median(reads), "validate_s": statistics.median(checks)}


def summarise(nbytes: int, times: dict, fixed_s: float) -> dict:
    read_s, val_s = times["read_s"], times["validate_s"]
    marginal_s = max(1e-9, val_s - fixed_s)
    return {
        **{k: round(v, 4) for k, v in times.items()},
        "read_mb_per_s": round(nbytes / MB / read_s, 1),
        "validate_mb_per_s": round(nbytes / MB / val_s, 1),
        "validate_marginal_mb_per_s": round(nbytes / MB / marginal_s, 1),
        "ratio": round(read_s / val_s, 3),
        "marginal_ratio": round(read_s / marginal_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=1024.0, help="size of the synthetic set")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs per mode")
    parser.add_argument("--workers", type=int, default=None,
                        help="validate.workers (default: params.yaml)")
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "validate.json")
    args = parser.parse_args()
    cfg = load_section(REPO / "params.yaml", "validate")
    if args.workers is not None:
        cfg = dataclasses.replace(cfg, workers=args.workers)
    features = default_features()
    with tempfile.TemporaryDirectory(prefix="leakpipe-bench-") as tmp:
        big = write_set(Path(tmp) / "big", args.mib, features)
        tiny = write_set(Path(tmp) / "tiny", TINY_FILES * 21e3 / MIB, features, seed=1)
        nbytes = plain_read(big)                   # also warms the page cache
        validate(tiny, cfg)                        # imports and first-call costs, once
        fixed_s = statistics.median(timed(lambda: validate(tiny, cfg)) for _ in range(3))
        warm = measure(big, cfg, args.repeat, cold=False)
        cold = measure(big, cfg, args.repeat, cold=True)
    import_s = import_seconds()
    results = {
        "mib": round(nbytes / MIB, 1), "cpus": os.cpu_count(), "workers": cfg.workers,
        "read_mb": cfg.read_mb, "import_s": round(import_s, 3),
        "fixed_run_s": round(fixed_s, 4),
        "warm_cache": summarise(nbytes, warm, fixed_s),
        "cold_cache": summarise(nbytes, cold, fixed_s),
    }
    for mode in ("warm_cache", "cold_cache"):
        entry = results[mode]
        budget = entry["read_s"] / TARGET_RATIO + import_s + fixed_s
        entry["target_s"] = round(budget, 4)
        entry["target_met"] = entry["validate_s"] + import_s <= budget
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
