"""Training throughput of the real stage loop: ram and stream vs the ceiling and the original.

One invocation, one synthetic split (``bench_train_input.write_split``), the params.yaml model,
loss, optimizer and batch size, and the stage's own step loop (``leakpipe.train.loop.
train_one_epoch``, timed by the stage's own profiler ``leakpipe.monitor.steps.StepProfiler``),
on the CPU under params.yaml's `runtime` amp / channels_last (``leakpipe.runtime``).
Four batch feeds, interleaved in rounds so that machine noise hits them alike:

* ``ceiling``: one batch already in place, stepped on again and again (the compute ceiling);
* ``ram``: ``ResidentSource`` over the split in RAM (the preload stage's ``ram`` placement);
* ``stream``: ``StreamSource`` reading the HDF5 file while training (``stream``);
* ``original``: the original design, a ``Dataset`` whose ``__getitem__`` reads ONE segment with
  h5py, through a ``DataLoader`` with worker processes (``bench_train_input.original_loader``);
* ``ram_aug`` / ``stream_aug``: ``ram`` / ``stream`` with ``train.input_norm: clip_band`` and
  ``train.augment`` on (params.yaml's amounts): the batch transform runs in the sources' finish
  step, so its cost shows as data wait. Under clip_band the gain / EQ draw cancels, but the
  per-file table gather and add run all the same; mixing and masks run as configured.

Per feed: segments/s, the ratio to the ceiling and to the original, the data-wait fraction of
step time, p50 / p99 step time and the spikes (steps over ``monitor.spike_factor`` x median).
Input-only throughput (no model) is ``bench_train_input.py``'s job; not repeated here.

    python benchmarks/perf/bench_train.py [--files 4000] [--rounds 6] [--steps 5] \
        [--out benchmarks/results/train.json]

Figures: docs/results/performance.md, docs/training.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train_input import (  # noqa: E402  (a sibling script, not a package)
    ORIGINAL_PREFETCH,
    ORIGINAL_WORKERS,
    SEED,
    describe,
    original_loader,
    repeat_batch,
    write_split,
)

from leakpipe.config import TrainConfig, load_section  # noqa: E402
from leakpipe.data.augment import make_transform  # noqa: E402
from leakpipe.data.resident_source import ResidentSource  # noqa: E402
from leakpipe.data.split_info import load_resident, read_split_info  # noqa: E402
from leakpipe.data.stream_source import StreamSource  # noqa: E402
from leakpipe.model import create_model  # noqa: E402
from leakpipe.monitor.steps import StepProfiler, profile_steps  # noqa: E402
from leakpipe.runtime import Runtime, make_runtime  # noqa: E402
from leakpipe.train.fit import configure_torch  # noqa: E402
from leakpipe.train.loop import Batch, train_one_epoch  # noqa: E402
from leakpipe.train.losses import LossConfig, build_loss  # noqa: E402
from leakpipe.train.optim import create_optimization  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MODES = ("ceiling", "ram", "stream", "ram_aug", "stream_aug", "original")
AUG_NORM = "clip_band"    # the input_norm of the augmented feeds
WARMUP_STEPS = 2          # untimed steps per feed before the rounds
MAX_SPIKES = 10
STORED = torch.float16    # feeds hand over batches as stored; the loop casts, as in the stage


def with_file_index(loader: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> Iterator[Batch]:
    """The original DataLoader's (x, y) batches as (x, y, file_idx); file_idx is unused."""
    for x, y in loader:
        yield x, y, torch.zeros(len(y), dtype=torch.int64)


class Trainer:
    """The stage's model, loss, optimizer and step loop, for any batch feed."""

    def __init__(self, cfg: TrainConfig, runtime: Runtime, n_classes: int, leak: int,
                 counts: list[int]) -> None:
        self.runtime = runtime
        configure_torch(cfg, runtime)
        model_cfg = load_section(REPO / "params.yaml", "model")
        self.model = runtime.place(create_model(model_cfg, n_classes))
        self.loss = build_loss(LossConfig.from_train(cfg), counts, leak, runtime.device)
        self.optim = create_optimization(self.model, cfg, runtime.device, 10_000,
                                         scaler_enabled=runtime.scaler)

    def steps(self, batches: Iterable[Batch], n: int, profiler: StepProfiler | None) -> None:
        """``n`` optimizer steps through ``train_one_epoch``, profiled when asked."""
        feed: Iterable[Batch] = itertools.islice(batches, n)
        if profiler is not None:
            feed = profiler.wrap(0, feed)
        train_one_epoch(self.model, feed, self.loss, self.optim, self.runtime)


def feeds(path: Path, cfg: TrainConfig, buffer_chunks: int) -> tuple[dict[str, Any], list]:
    """The batch iterators (endless enough for the rounds), and the streams to close."""
    data = load_resident(path, "ram", "cpu", binary=cfg.binary)
    ram = ResidentSource(data, cfg.batch_size, seed=SEED, dtype=STORED)
    fixed = next(iter(ResidentSource(data, cfg.batch_size, seed=SEED + 1, dtype=STORED)))
    stream = StreamSource(path, cfg.batch_size, seed=SEED, binary=cfg.binary, dtype=STORED,
                          buffer_chunks=buffer_chunks)
    augment = dataclasses.replace(cfg.augment, enabled=True)
    ram_aug = ResidentSource(data, cfg.batch_size, seed=SEED, dtype=STORED,
                             transform=make_transform(data.info, norm=AUG_NORM, augment=augment,
                                                      seed=SEED, segments=data.segments))
    info = read_split_info(path, cfg.binary)
    stream_aug = StreamSource(path, cfg.batch_size, seed=SEED, binary=cfg.binary, dtype=STORED,
                              buffer_chunks=buffer_chunks,
                              transform=make_transform(info, norm=AUG_NORM, augment=augment,
                                                       seed=SEED))

    def epochs(source: Any) -> Iterator[Batch]:
        for epoch in itertools.count():
            yield from source.epoch(epoch)

    its = {"ceiling": repeat_batch(fixed), "ram": epochs(ram), "stream": epochs(stream),
           "ram_aug": epochs(ram_aug), "stream_aug": epochs(stream_aug),
           "original": with_file_index(original_loader(path, cfg.batch_size))}
    return {"iterators": its, "data": data}, [stream, stream_aug]


def measure(trainer: Trainer, its: dict[str, Iterator[Batch]], rounds: int,
            steps: int, spike_factor: float) -> dict[str, Any]:
    """Profiled steps per feed: the in-process feeds interleaved in rounds, the original last.

    The original's worker processes keep reading while other feeds step, so interleaving
    would refill its prefetch queue for free: it runs alone, after draining that queue.
    """
    ours = {k: v for k, v in its.items() if k != "original"}
    for it in ours.values():
        trainer.steps(it, WARMUP_STEPS, None)
    timed: dict[str, list] = {name: [] for name in its}
    for _ in range(rounds):
        for name, it in ours.items():
            timed[name] += _profiled(trainer, it, steps)
    trainer.steps(its["original"], WARMUP_STEPS + ORIGINAL_WORKERS * ORIGINAL_PREFETCH, None)
    timed["original"] = _profiled(trainer, its["original"], rounds * steps)
    out = {}
    for name in MODES:
        profile = profile_steps(timed[name], spike_factor, MAX_SPIKES)
        out[name] = {**profile.metrics(), "steps": profile.steps, "batch": timed[name][0].size}
    return out


def _profiled(trainer: Trainer, it: Iterator[Batch], steps: int) -> list:
    profiler = StepProfiler()
    trainer.steps(it, steps, profiler)
    return profiler.finish_epoch()


def ratios(result: dict[str, Any]) -> None:
    training = result["training"]
    rate = {k: v["perf/step_samples_per_s"] for k, v in training.items()}
    result["ratios_vs_ceiling"] = {k: rate[k] / rate["ceiling"] for k in MODES}
    result["ratios_vs_original"] = {k: rate[k] / rate["original"] for k in MODES}
    wait = {k: v["perf/data_wait_frac"] for k, v in training.items()}
    result["augment"]["data_wait_frac"] = {
        placement: {"off": wait[placement], "on": wait[f"{placement}_aug"]}
        for placement in ("ram", "stream")}


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{'feed':<12}{'seg/s':>10}{'x ceiling':>11}{'x original':>12}{'data wait':>11}"
          f"{'p50 ms':>9}{'p99 ms':>9}{'spikes':>8}")
    for name in MODES:
        r = result["training"][name]
        print(f"{name:<12}{r['perf/step_samples_per_s']:>10,.0f}"
              f"{result['ratios_vs_ceiling'][name]:>11.3f}"
              f"{result['ratios_vs_original'][name]:>12.1f}"
              f"{100 * r['perf/data_wait_frac']:>10.2f}%{r['perf/step_p50_ms']:>9.1f}"
              f"{r['perf/step_p99_ms']:>9.1f}{int(r['perf/step_spikes']):>8}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_section(REPO / "params.yaml", "train")
    features = load_section(REPO / "params.yaml", "build").features
    monitor = load_section(REPO / "params.yaml", "monitor")
    rt = load_section(REPO / "params.yaml", "runtime")
    runtime = make_runtime("cpu", rt.amp, rt.channels_last)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.h5"
        write_split(path, features, args.files)
        result = describe(path, cfg.batch_size, args.buffer_chunks, torch.device("cpu"))
        made, streams = feeds(path, cfg, args.buffer_chunks)
        info = made["data"].info
        counts = [int((info.file_labels == c).sum()) for c in range(len(info.classes))]
        trainer = Trainer(cfg, runtime, len(info.classes), info.leak_label, counts)
        try:
            result["training"] = measure(trainer, made["iterators"], args.rounds, args.steps,
                                         monitor.spike_factor)
        finally:
            for stream in streams:
                stream.close()
    result["augment"] = {"feeds": ["ram_aug", "stream_aug"], "input_norm": AUG_NORM,
                         "params": dataclasses.asdict(cfg.augment) | {"enabled": True}}
    result["original"] = {"workers": ORIGINAL_WORKERS, "prefetch_factor": ORIGINAL_PREFETCH,
                          "timed_steps": args.rounds * args.steps,
                          "untimed_steps": WARMUP_STEPS + ORIGINAL_WORKERS * ORIGINAL_PREFETCH}
    result["loop"] = {"rounds": args.rounds, "steps_per_round": args.steps,
                      "warmup_steps": WARMUP_STEPS, "spike_factor": monitor.spike_factor,
                      "amp": rt.amp, "grad_accum_steps": cfg.grad_accum_steps}
    result["machine"]["load_avg_1min_at_end"] = os.getloadavg()[0]
    ratios(result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4000, help="clips in the synthetic split")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps per feed and round")
    parser.add_argument("--buffer-chunks", type=int, default=16, help="stream window, chunks")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "train.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = run(args)
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
