"""Preload estimate error: planned bytes vs measured growth when training loads a larger set.

Writes a synthetic train split (default 1 GiB of float16, the default feature shape), loads it
with the training loader (``leakpipe.data.split_info.load_resident`` + ``ResidentSource``, two
batches in flight) and compares the memory growth with ``leakpipe.preload.estimate``: host RSS
for ``ram``, ``torch.cuda.memory_allocated`` for ``device`` (CUDA only; ``ram`` is then pinned).
The issue's bound is 10 %. It also prints the plan `preload` would make on this machine.

    python benchmarks/perf/bench_preload.py [--mib 1024] [--out benchmarks/results/preload.json]

Figures: docs/preload.md, docs/results/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from resident import Growth, hold_training_split, measure_growth

from leakpipe.config import FeatureConfig, load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.writer import SplitWriter
from leakpipe.preload import estimate, plan_training, read_shapes
from leakpipe.preload.estimate import DEVICE, HOST

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
BOUND = 0.10
BATCH_SIZES = (256, 8192)
WRITE_BLOCK = 2000  # clips per append
WARMUP_FILES = 100


def write_split(path: Path, mib: float, features: FeatureConfig, seed: int = 0) -> Path:
    row_bytes = int(np.prod(features.segment_shape)) * 2
    files = max(1, int(mib * MIB) // row_bytes)
    rng = np.random.default_rng(seed)
    with SplitWriter(path, "train", features, KNOWN_CLASSES) as writer:
        for start in range(0, files, WRITE_BLOCK):
            n = min(WRITE_BLOCK, files - start)
            mel = rng.uniform(-100, 40, (n, *features.segment_shape)).astype(np.float16)
            writer.append(mel, (start // WRITE_BLOCK) % len(KNOWN_CLASSES), f"rec{start}",
                          "site0")
    return path


def measure(path: Path, placement: str, batch_size: int, device: str) -> dict:
    shape = read_shapes({"train": path})["train"]
    cuda = device == "cuda"
    planned = estimate(shape, shape.stored_dtype, batch_size, placement, cuda=cuda)
    start = time.perf_counter()
    held, growth = measure_growth(
        lambda: hold_training_split(path, placement, batch_size, device=device), device)
    seconds = time.perf_counter() - start
    where, measured = (DEVICE, growth.device) if placement == "device" else (HOST, growth.host)
    steady = planned.total(where, peak=False)
    del held
    error = Growth.relative_error(measured, steady)
    return {"placement": placement, "device": device, "batch_size": batch_size,
            "measured": where, "estimate_bytes": steady, "measured_bytes": measured,
            "error": round(error, 5), "within_bound": error <= BOUND,
            "load_s": round(seconds, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=1024.0, help="size of the train split")
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "preload.json")
    args = parser.parse_args()
    features = load_section(REPO / "params.yaml", "build").features
    cfg = load_section(REPO / "params.yaml", "preload")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    placements = ["ram", "device"] if device == "cuda" else ["ram"]
    with tempfile.TemporaryDirectory(prefix="leakpipe-bench-") as tmp:
        warmup = write_split(Path(tmp) / "warmup.h5", WARMUP_FILES * 21e3 / MIB, features)
        path = write_split(Path(tmp) / "train.h5", args.mib, features, seed=1)
        for placement in placements:
            hold_training_split(warmup, placement, BATCH_SIZES[0], device=device)
        rows = [measure(path, p, b, device) for p in placements for b in BATCH_SIZES]
        plan, _ = plan_training(read_shapes({"train": path}), cfg)
    results = {"mib": args.mib, "device": device, "cpus": os.cpu_count(),
               "max_error": max(r["error"] for r in rows), "bound": BOUND,
               "measurements": rows,
               "plan_here": {"placement": plan.placement, "batch_size_max": plan.batch_size_max,
                             "reason": plan.reason}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
