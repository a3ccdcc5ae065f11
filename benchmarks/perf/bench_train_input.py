"""Training input throughput: resident and streamed batches vs the original per-sample loader.

One invocation, one synthetic split of random float16 mel segments written with SplitWriter:

1. Input only (no model), same batch size: segments/s delivered by (a) ``ResidentSource`` in
   RAM, (b) ``StreamSource`` from HDF5, (c) the original design: a ``Dataset`` whose
   ``__getitem__`` reads ONE segment from h5py, through a ``DataLoader`` with worker processes
   (capped to a fixed number of batches).
2. Training steps of ``leakpipe.model.LeakCNN`` (a stand-in of the same layers if it cannot be
   imported) fed from RAM and from the stream, against the compute ceiling (the same model
   stepping on one batch already in place): segments/s, data-wait fraction, p50 / p99 step time.

The stream source holds at most 2 x ``buffer_chunks`` HDF5 chunks; the split was just written,
so its reads may come from the OS page cache (dropping it needs root): the stream figures are
an upper bound for a cold disk.

    python benchmarks/perf/bench_train_input.py [--files 4000] [--batch 1024] \
        [--out benchmarks/results/train_input.json]

Figures: docs/input-pipeline.md, docs/results/performance.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import h5py
import numpy as np
import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from leakpipe.config import FeatureConfig, load_section
from leakpipe.constants import H5_MEL, KNOWN_CLASSES
from leakpipe.data.resident_source import ResidentSource
from leakpipe.data.split_info import load_resident
from leakpipe.data.stream_source import DEFAULT_BUFFER_CHUNKS, StreamSource
from leakpipe.data.writer import SplitWriter

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
SEED = 0
ORIGINAL_WORKERS = 2          # worker processes of the original-design DataLoader
ORIGINAL_PREFETCH = 2         # batches prefetched per worker
ORIGINAL_BATCHES = 12         # the per-sample loader is timed on this many batches after the first
TRAIN_ROUNDS = 8              # training modes are interleaved in this many rounds ...
STEPS_PER_ROUND = 5           # ... of this many timed steps each (40 steps per mode)
WARMUP_STEPS = 2              # untimed steps per mode before the rounds
RESIDENT_EPOCHS = 15          # input-only epochs of the resident source (median reported)
STREAM_EPOCHS = 7             # input-only epochs of the stream source (median reported)
CLIPS_PER_APPEND = 50         # clips written per SplitWriter.append (one label each)
RSS_EVERY = 16                # sample the process RSS every this many stream batches
SPIKE_S = 0.050               # a data wait above this is a stutter spike (the original's rule)
LEARNING_RATE = 1e-3


# -- the synthetic split -------------------------------------------------------------------------

def write_split(path: Path, features: FeatureConfig, n_files: int) -> None:
    """Random float16 log-mel rows, labels drawn over KNOWN_CLASSES."""
    rng = np.random.default_rng(SEED)
    with SplitWriter(path, "train", features, KNOWN_CLASSES) as writer:
        for start in range(0, n_files, CLIPS_PER_APPEND):
            n = min(CLIPS_PER_APPEND, n_files - start)
            mel = rng.normal(-40.0, 10.0, (n, *features.segment_shape)).astype(np.float16)
            writer.append(mel, int(rng.integers(len(KNOWN_CLASSES))), f"r{start}", "site")


# -- the original design ---------------------------------------------------------------------------

class PerSampleDataset(Dataset):
    """The original loader: one h5py read of one segment per ``__getitem__`` (file per worker)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with h5py.File(path, "r") as f:
            self.shape = f[H5_MEL].shape          # (files, n_long, n_short, M, T)
            self.labels = f["labels"][:].astype(np.int64)
        self.h5: h5py.File | None = None

    def __len__(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.h5 is None:
            self.h5 = h5py.File(self.path, "r")
        n_long, n_short = self.shape[1:3]
        f, rest = divmod(i, n_long * n_short)
        seg = self.h5[H5_MEL][f, rest // n_short, rest % n_short]   # (M, T)
        return torch.from_numpy(seg).unsqueeze(0), int(self.labels[f])  # (1, M, T)


def original_loader(path: Path, batch_size: int) -> DataLoader:
    return DataLoader(PerSampleDataset(path), batch_size=batch_size, shuffle=True,
                      num_workers=ORIGINAL_WORKERS, prefetch_factor=ORIGINAL_PREFETCH,
                      generator=torch.Generator().manual_seed(SEED))


# -- measurements ----------------------------------------------------------------------------------

def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def drain(batches: Iterable, device: torch.device, limit: int | None = None,
          skip_first: bool = False, on_batch: Callable[[int], None] | None = None) -> dict:
    """Consume batches with no model; segments/s and the wait for each batch."""
    t0 = time.perf_counter()
    it: Iterator = iter(batches)
    first = next(it)
    sync(device)
    first_s = time.perf_counter() - t0
    waits = [] if skip_first else [first_s]
    segments = 0 if skip_first else len(first[0])
    start = time.perf_counter() if skip_first else t0   # the original's worker start-up excluded
    last = time.perf_counter()
    for i, batch in enumerate(it):
        segments += len(batch[0])
        sync(device)
        now = time.perf_counter()
        waits.append(now - last)
        last = now
        if on_batch is not None:
            on_batch(i)
        if limit is not None and i + 1 >= limit:
            break
    seconds = time.perf_counter() - start
    return {"segments": segments, "seconds": seconds, "segments_per_s": segments / seconds,
            "first_batch_s": first_s, **wait_stats(waits)}


def repeated(measure: Callable[[], dict], repeats: int) -> dict:
    """The median run by segments/s of ``repeats`` runs, plus the best (a shared machine)."""
    runs = sorted((measure() for _ in range(repeats)), key=lambda r: r["segments_per_s"])
    median = dict(runs[len(runs) // 2])
    median["best_segments_per_s"] = runs[-1]["segments_per_s"]
    median["repeats"] = repeats
    return median


def wait_stats(waits: list[float]) -> dict:
    w = np.asarray(waits) if waits else np.zeros(1)
    return {"batches": len(waits), "wait_p50_ms": 1e3 * float(np.percentile(w, 50)),
            "wait_p99_ms": 1e3 * float(np.percentile(w, 99)),
            "wait_max_ms": 1e3 * float(w.max()), "spikes_over_50ms": int((w > SPIKE_S).sum())}


class StandInCNN(nn.Module):
    """LeakCNN's layers (used only if leakpipe.model cannot be imported)."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d((2, 1)), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d((2, 1)),
            nn.AdaptiveAvgPool2d((16, 1)), nn.Flatten(), nn.Linear(2048, 256), nn.ReLU(),
            nn.Linear(256, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def make_model(n_classes: int, device: torch.device) -> tuple[nn.Module, str]:
    try:
        from leakpipe.model import LeakCNN
    except ImportError:
        return StandInCNN(n_classes).to(device), "StandInCNN"
    torch.manual_seed(SEED)
    return LeakCNN(n_classes).to(device), "LeakCNN"


def make_step(model: nn.Module) -> Callable[[torch.Tensor, torch.Tensor], None]:
    opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        out = model(x)
        logits = out[0] if isinstance(out, tuple) else out     # (B, C)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


Mode = tuple[Iterator, list[float] | None]   # batches, the source's wait list (None: in place)


def train_modes(step: Callable, modes: dict[str, Mode], device: torch.device) -> dict:
    """Interleave the modes in rounds so machine noise hits them alike; per-step timings."""
    times: dict[str, list[float]] = {name: [] for name in modes}
    waited: dict[str, list[float]] = {name: [] for name in modes}
    sizes: dict[str, int] = {}
    for it, _waits in modes.values():
        for _ in range(WARMUP_STEPS):
            x, y, _files = next(it)
            step(x, y)
    sync(device)
    for _ in range(TRAIN_ROUNDS):
        for name, (it, waits) in modes.items():
            for _ in range(STEPS_PER_ROUND):
                t0 = time.perf_counter()
                x, y, _files = next(it)
                waited[name].append(waits[-1] if waits is not None else 0.0)
                step(x, y)
                sync(device)
                times[name].append(time.perf_counter() - t0)
                sizes[name] = len(x)
    return {name: step_stats(times[name], waited[name], sizes[name]) for name in modes}


def step_stats(times: list[float], waited: list[float], batch: int) -> dict:
    t = np.asarray(times)
    return {"steps": len(t), "segments_per_s": batch * len(t) / t.sum(),
            "segments_per_s_at_p50": batch / float(np.percentile(t, 50)),
            "data_wait_frac": float(sum(waited) / t.sum()),
            "wait_max_ms": 1e3 * max(waited), "step_p50_ms": 1e3 * float(np.percentile(t, 50)),
            "step_p99_ms": 1e3 * float(np.percentile(t, 99))}


def repeat_batch(batch: tuple[torch.Tensor, ...]) -> Iterator[tuple[torch.Tensor, ...]]:
    while True:
        yield batch


# -- main ------------------------------------------------------------------------------------------

def input_only(path: Path, batch: int, device: torch.device, buffer_chunks: int) -> dict:
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    peak = [rss0]

    def sample_rss(i: int) -> None:
        if i % RSS_EVERY == 0:
            peak.append(proc.memory_info().rss)

    stream = StreamSource(path, batch, seed=SEED, binary=False, device=device,
                          buffer_chunks=buffer_chunks)
    out = {"stream": repeated(lambda: drain(stream, device, on_batch=sample_rss),
                                STREAM_EPOCHS)}
    out["stream"]["peak_rss_growth_mib"] = (max(peak) - rss0) / 2**20
    out["original_per_sample"] = drain(original_loader(path, batch), device,
                                       limit=ORIGINAL_BATCHES, skip_first=True)
    t0 = time.perf_counter()
    data = load_resident(path, "ram", device, binary=False)
    load_s = time.perf_counter() - t0
    resident = ResidentSource(data, batch, seed=SEED)
    out["resident_ram"] = repeated(lambda: drain(resident, device), RESIDENT_EPOCHS)
    out["resident_ram"]["load_s"] = load_s
    return out


def training(path: Path, batch: int, device: torch.device, buffer_chunks: int) -> dict:
    data = load_resident(path, "ram", device, binary=False)
    model, name = make_model(len(data.info.classes), device)
    ram = ResidentSource(data, batch, seed=SEED, dtype=torch.float32)
    fixed = next(iter(ResidentSource(data, batch, seed=SEED + 1, dtype=torch.float32)))
    stream = StreamSource(path, batch, seed=SEED, binary=False, device=device,
                          dtype=torch.float32, buffer_chunks=buffer_chunks)
    modes = {"ceiling": (repeat_batch(fixed), None), "ram": (iter(ram), ram.wait_times),
             "stream": (iter(stream), stream.wait_times)}
    with stream:
        return {"model": name, **train_modes(make_step(model), modes, device)}


def print_table(result: dict) -> None:
    base = result["input_only"]["original_per_sample"]["segments_per_s"]
    print(f"\n{'input only (no model)':<22}{'seg/s median':>14}{'seg/s best':>14}"
          f"{'x original':>12}{'wait p50 ms':>13}{'p99 ms':>9}{'spikes':>8}")
    for name, r in result["input_only"].items():
        best = r.get("best_segments_per_s", r["segments_per_s"])
        print(f"{name:<22}{r['segments_per_s']:>14,.0f}{best:>14,.0f}"
              f"{r['segments_per_s'] / base:>12.0f}{r['wait_p50_ms']:>13.3f}"
              f"{r['wait_p99_ms']:>9.2f}{r['spikes_over_50ms']:>8}")
    tr = result["training"]
    print(f"\n{'training (' + tr['model'] + ')':<22}{'seg/s':>14}{'seg/s @p50':>14}"
          f"{'x ceil @p50':>12}{'wait frac':>13}{'p50 ms':>9}{'p99 ms':>8}")
    for name in ("ceiling", "ram", "stream"):
        r = tr[name]
        print(f"{name:<22}{r['segments_per_s']:>14,.0f}{r['segments_per_s_at_p50']:>14,.0f}"
              f"{result['ratios_vs_ceiling_at_p50'][name]:>12.3f}{r['data_wait_frac']:>13.4f}"
              f"{r['step_p50_ms']:>9.1f}{r['step_p99_ms']:>8.1f}")


def ratios(result: dict) -> None:
    """Ratios against the original loader (medians) and the compute ceiling (mean and p50)."""
    base = result["input_only"]["original_per_sample"]["segments_per_s"]
    result["ratios_vs_original"] = {k: v["segments_per_s"] / base
                                    for k, v in result["input_only"].items()}
    tr = result["training"]
    for key in ("segments_per_s", "segments_per_s_at_p50"):
        suffix = "" if key == "segments_per_s" else "_at_p50"
        result[f"ratios_vs_ceiling{suffix}"] = {k: tr[k][key] / tr["ceiling"][key]
                                               for k in ("ceiling", "ram", "stream")}


def describe(path: Path, batch: int, buffer_chunks: int, device: torch.device) -> dict:
    """Machine, split and stream-budget facts recorded with the figures."""
    info = StreamSource(path, batch, seed=SEED, binary=False).info
    seg_bytes = int(np.prod(info.mel_shape)) * info.dtype.itemsize
    chunk_bytes = info.chunk_rows * info.segments_per_file * seg_bytes
    return {
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "device": str(device),
                    "python": platform.python_version(), "torch_threads": torch.get_num_threads(),
                    "load_avg_1min_at_start": os.getloadavg()[0]},
        "split": {"files": info.n_files, "segment_shape": list(info.segment_shape),
                  "segments": info.n_segments, "mib": info.n_segments * seg_bytes / 2**20,
                  "chunk_rows": info.chunk_rows, "batch": batch},
        "stream_budget": {"buffer_chunks": buffer_chunks,
                          "windows_held_at_most_mib": 2 * buffer_chunks * chunk_bytes / 2**20,
                          "split_mib": info.n_segments * seg_bytes / 2**20,
                          "page_cache": "the split was just written: reads may come from the "
                                        "OS page cache (dropping it needs root)"},
        "original": {"workers": ORIGINAL_WORKERS, "prefetch_factor": ORIGINAL_PREFETCH,
                     "timed_batches": ORIGINAL_BATCHES},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4000, help="clips in the synthetic split")
    parser.add_argument("--batch", type=int, default=1024, help="segments per batch")
    parser.add_argument("--buffer-chunks", type=int, default=DEFAULT_BUFFER_CHUNKS)
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "train_input.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    features = load_section(REPO / "params.yaml", "build").features
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.h5"
        write_split(path, features, args.files)
        result = describe(path, args.batch, args.buffer_chunks, device)
        result["input_only"] = input_only(path, args.batch, device, args.buffer_chunks)
        result["training"] = training(path, args.batch, device, args.buffer_chunks)
    result["machine"]["load_avg_1min_at_end"] = os.getloadavg()[0]
    ratios(result)
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
