"""Evaluation throughput: leakpipe's batched evaluation vs the forward-only ceiling and the
original per-file loop, measured in one run on one synthetic split.

Ways to score every file of the split with the same trained weights (a LeakCNN built from the
params' `model`, random weights; what is measured does not depend on them). leakpipe runs the
network's exact inference form (``leakpipe.inference``: 1-D convolutions for one-frame
segments); the original ran the LeakCNN module itself:

1. ceiling: the inference form's forward pass alone on batches of whole files already in place
   (float32, on the device), as many and as large as leakpipe's: the compute bound;
2. leakpipe: ``leakpipe.scoring.score.score_batches`` with the inference form, called as the
   evaluate stage calls it (``leakpipe.evaluate.detector_evaluation``), over ``FileOrderBatches``
   sized by the memory budget (``leakpipe.scoring.batching.batch_segments``), then every
   threshold of the `decision` grid decided by the rule in one pass (``file_decisions``); the
   split resident in RAM (``ram``, loaded before the clock starts, load time reported) and
   streamed from HDF5 (``stream``, reads included);
3. per-file loop (the original): per file one h5py read, one forward pass of the LeakCNN module,
   one host copy of its probabilities, then its vote;
4. per-file loop with the inference form: the same loop on leakpipe's network, to show how much
   of the gain is batching and how much the inference form.

The process keeps freed host memory for reuse as the evaluate command does
(``leakpipe.allocator``); every mode runs under the same setting, and under the same runtime
(``leakpipe.runtime``: params.yaml's `runtime` device / amp / channels_last).

Modes are interleaved in rounds; ratios of the median and of the best round are reported (the
machine may be shared: interference only adds time).
Targets (issue 6): leakpipe >= 0.9 x the ceiling and >= 5 x the per-file loop.

    python benchmarks/perf/bench_evaluate.py [--files 160] [--rounds 5] \
        [--out benchmarks/results/evaluate.json]

Figures: docs/evaluation.md, docs/results/performance.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn

from leakpipe.allocator import retain_freed_memory
from leakpipe.config import DecisionConfig, EvaluateConfig, FeatureConfig, ModelConfig, load_section
from leakpipe.constants import H5_MEL, KNOWN_CLASSES
from leakpipe.data.file_order import FileOrderBatches
from leakpipe.data.schema import leak_index
from leakpipe.data.split_info import load_resident, read_split_info
from leakpipe.data.writer import SplitWriter
from leakpipe.decision.voting import file_decisions, segment_leak_prob, threshold_grid
from leakpipe.inference import inference_form
from leakpipe.model import create_model
from leakpipe.runtime import Runtime, make_runtime
from leakpipe.scoring.batching import BatchLimits, batch_segments
from leakpipe.scoring.score import score_batches

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
SEED = 0
CLIPS_PER_APPEND = 20
MEMORY = {"safety": 0.8, "host_reserve_mb": 2048.0, "device_reserve_mb": 4096.0}
TARGET_CEILING = 0.9
TARGET_PER_FILE = 5.0


def write_split(path: Path, features: FeatureConfig, n_files: int) -> None:
    """Random float16 log-mel rows, labels drawn over KNOWN_CLASSES."""
    rng = np.random.default_rng(SEED)
    with SplitWriter(path, "test", features, KNOWN_CLASSES) as writer:
        for start in range(0, n_files, CLIPS_PER_APPEND):
            n = min(CLIPS_PER_APPEND, n_files - start)
            mel = rng.normal(-40.0, 10.0, (n, *features.segment_shape)).astype(np.float16)
            writer.append(mel, int(rng.integers(len(KNOWN_CLASSES))), f"r{start}", "site")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Bench:
    """Everything the modes share: model, split, grid, runtime, batch size."""

    def __init__(self, path: Path, model_cfg: ModelConfig, cfg: EvaluateConfig,
                 decision: DecisionConfig, runtime: Runtime) -> None:
        self.path, self.cfg, self.decision, self.runtime = path, cfg, decision, runtime
        self.device = runtime.device
        self.info = read_split_info(path, binary=False)
        self.leak = leak_index(self.info.classes)
        self.model: nn.Module = create_model(model_cfg, len(self.info.classes)).to(self.device)
        self.model.eval()
        self.fast = inference_form(self.model, self.info.mel_shape[-1])   # what leakpipe runs
        self.grid = threshold_grid(decision.threshold_min, decision.threshold_max,
                                   decision.threshold_step)
        limits = BatchLimits(max_segments=cfg.max_batch_segments,
                             cpu_max_segments=cfg.cpu_max_batch_segments, **MEMORY)
        self.segments = batch_segments(model_cfg, self.info.mel_shape, self.device, limits)
        start = time.perf_counter()
        self.resident = load_resident(path, "ram", self.device, binary=False)
        self.load_seconds = time.perf_counter() - start

    def ceiling(self) -> float:
        batches = FileOrderBatches(self.resident, self.segments, device=self.device)
        a, b = batches.ranges()[0]
        spf = self.info.segments_per_file
        x = self.runtime.to_device(self.resident.segments[a * spf:b * spf])   # (B, 1, M, T)
        sync(self.device)
        start = time.perf_counter()
        with torch.inference_mode(), self.runtime.autocast():
            for first, end in batches.ranges():                 # the same batch sizes
                self.fast(x[:(end - first) * spf])
        sync(self.device)
        return time.perf_counter() - start

    def leakpipe(self, placement: str) -> float:
        source = self.resident if placement == "ram" else self.info
        start = time.perf_counter()
        batches = FileOrderBatches(source, self.segments, device=self.device)
        info = batches.info
        scores = score_batches(self.fast, batches, segments=tuple(info.segment_shape[:2]),
                               leak_index=info.leak_label, prob_mode=self.decision.prob_mode,
                               runtime=self.runtime, progress=False, desc="evaluate test",
                               total=len(batches))
        file_decisions(scores.seg_probs, self.grid, self.decision.rule,
                       self.decision.vote_fraction)
        return time.perf_counter() - start

    def per_file(self, model: nn.Module) -> float:
        """The original loop: one read, one forward, one host copy per file."""
        n_long, n_short, n_mels, n_frames = self.info.segment_shape
        start = time.perf_counter()
        with h5py.File(self.path, "r") as f, torch.inference_mode():
            mel = f[H5_MEL]
            for i in range(self.info.n_files):
                x = torch.from_numpy(mel[i]).reshape(-1, 1, n_mels, n_frames)
                x = x.to(self.device).float()                           # (L * S, 1, M, T)
                with self.runtime.autocast():
                    logits, leak_logit = model(x)
                probs = segment_leak_prob(logits, leak_logit, self.leak,
                                          self.decision.prob_mode)
                probs = probs.cpu().numpy().reshape(1, n_long, n_short)
                file_decisions(probs, self.grid, self.decision.rule,
                               self.decision.vote_fraction)
        return time.perf_counter() - start


def rounds(modes: dict[str, Callable[[], float]], n_rounds: int) -> dict[str, list[float]]:
    """Interleave the modes so machine noise hits them alike; seconds per mode per round."""
    for measure in modes.values():
        measure()                                       # warm-up (allocator, kernels)
    times: dict[str, list[float]] = {name: [] for name in modes}
    for r in range(n_rounds):
        for name, measure in modes.items():
            times[name].append(measure())
            log.info("round %d %s: %.2f s", r, name, times[name][-1])
    return times


def summarise(times: dict[str, list[float]], n_files: int) -> dict[str, dict[str, float]]:
    """Files/s of the median round and of the best round (interference only adds time)."""
    return {name: {"files_per_s": n_files / statistics.median(t),
                   "best_files_per_s": n_files / min(t), "all_s": [round(v, 4) for v in t]}
            for name, t in times.items()}


def describe(bench: Bench, n_files: int) -> dict:
    spf = bench.info.segments_per_file
    files_per_batch = max(1, bench.segments // spf)
    return {
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__,
                    "device": str(bench.device), "python": platform.python_version(),
                    "torch_threads": torch.get_num_threads(),
                    "load_avg_1min_at_start": os.getloadavg()[0]},
        "split": {"files": n_files, "segment_shape": list(bench.info.segment_shape),
                  "segments": n_files * spf},
        "batch": {"segment_budget": bench.segments, "files": min(files_per_batch, n_files),
                  "segments": min(files_per_batch, n_files) * spf},
        "resident_load_s": round(bench.load_seconds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=160, help="files (clips) in the split")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "evaluate.json")
    parser.add_argument("--cap", type=int, default=None,
                        help="evaluate.(cpu_)max_batch_segments (default: params.yaml)")
    parser.add_argument("--amp", choices=("auto", "off", "fp16", "bf16"), default=None,
                        help="runtime.amp for every mode (default: params.yaml)")
    args = parser.parse_args()
    retained = retain_freed_memory()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    params = REPO / "params.yaml"
    features = load_section(params, "build").features
    with tempfile.TemporaryDirectory(prefix="leakpipe-bench-eval-") as tmp:
        path = Path(tmp) / "test.h5"
        write_split(path, features, args.files)
        cfg = load_section(params, "evaluate")
        if args.cap is not None:
            cfg = dataclasses.replace(cfg, max_batch_segments=args.cap,
                                      cpu_max_batch_segments=args.cap)
        rt = load_section(params, "runtime")
        runtime = make_runtime(rt.device, args.amp or rt.amp, rt.channels_last)
        bench = Bench(path, load_section(params, "model"), cfg,
                      load_section(params, "decision"), runtime)
        result = describe(bench, args.files)
        result["machine"]["freed_memory_retained"] = retained
        times = rounds({"ceiling": bench.ceiling, "leakpipe_ram": lambda: bench.leakpipe("ram"),
                        "leakpipe_stream": lambda: bench.leakpipe("stream"),
                        "per_file": lambda: bench.per_file(bench.model),
                        "per_file_inference_form": lambda: bench.per_file(bench.fast)},
                       args.rounds)
    result["modes"] = summarise(times, args.files)
    result["ratios"] = {"median": ratios(result["modes"], "files_per_s"),
                        "best": ratios(result["modes"], "best_files_per_s")}
    result["machine"]["load_avg_1min_at_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"batch": result["batch"], "ratios": result["ratios"]}, indent=2))


def ratios(modes: dict[str, dict[str, float]], key: str) -> dict[str, float | bool]:
    """leakpipe's files/s over the ceiling's and the per-file loop's (``key``: which rate)."""
    rate = {name: m[key] for name, m in modes.items()}
    out: dict[str, float | bool] = {
        "ram_vs_ceiling": rate["leakpipe_ram"] / rate["ceiling"],
        "stream_vs_ceiling": rate["leakpipe_stream"] / rate["ceiling"],
        "ram_vs_per_file": rate["leakpipe_ram"] / rate["per_file"],
        "stream_vs_per_file": rate["leakpipe_stream"] / rate["per_file"],
        "batching_alone": rate["leakpipe_ram"] / rate["per_file_inference_form"],
        "inference_form_alone": rate["per_file_inference_form"] / rate["per_file"],
    }
    out["meets_ceiling_target"] = min(out["ram_vs_ceiling"], out["stream_vs_ceiling"]) >= \
        TARGET_CEILING
    out["meets_per_file_target"] = min(out["ram_vs_per_file"], out["stream_vs_per_file"]) >= \
        TARGET_PER_FILE
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


if __name__ == "__main__":
    main()
