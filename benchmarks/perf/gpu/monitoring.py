"""NVML: leakpipe.monitor's sampler on a busy GPU, and GPU utilisation with the step-time
profile while training (host-side and synchronised per step).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from benchmarks.perf.gpu.common import (
    SAMPLE_S,
    STORED,
    SYNCED_STEPS,
    Setup,
    make_loss,
    require,
    runtime_for,
    sync,
)


def check_nvml_sampling(setup: Setup) -> dict[str, Any]:
    """leakpipe.monitor's SystemSampler reads GPU utilisation and memory while the GPU works."""
    from leakpipe.monitor.system import SystemSampler

    sampler = SystemSampler(SAMPLE_S, gpu=True).start()
    busy(setup.device, seconds=2.0)
    sampler.stop()
    samples = sampler.snapshot()
    gpus = [g for s in samples for g in s.gpus]
    details = {"note": sampler.gpu_note or "sampled", "samples": len(samples),
               "gpu_samples": len(gpus),
               "gpus_seen": sorted({g.index for g in gpus}),
               "util_max": max((g.util_percent for g in gpus), default=None),
               "util_mean": float(np.mean([g.util_percent for g in gpus])) if gpus else None,
               "mem_used_mb_max": max((g.mem_used_mb for g in gpus), default=None),
               "mem_total_mb": gpus[0].mem_total_mb if gpus else None}
    require(bool(gpus), f"no GPU samples ({details['note']})")
    require((details["util_max"] or 0) > 0, "GPU utilisation read 0 % throughout a busy GPU")
    return details


def check_train_step_profile(setup: Setup) -> dict[str, Any]:
    """GPU utilisation while training (NVML) and median / p99 step time, for the params batch
    size and the preload plan's largest one (fp16, device placement, augmentation on)."""
    sizes = sorted({setup.cfg.batch_size, setup.preload.max_batch_size})
    details = {f"batch_{b}": profile_training(setup, b) for b in sizes}
    for name, got in details.items():
        require(got["steps"] > 0, f"{name}: no steps profiled")
        require(got["gpu_samples"] > 0, f"{name}: no NVML samples during training")
    return details


def profile_training(setup: Setup, batch_size: int) -> dict[str, Any]:
    """Train for ``setup.seconds`` under the step profiler and NVML, then SYNCED_STEPS steps
    with a synchronize each; step-time percentiles of both and the GPU utilisation."""
    from leakpipe.data.batches import make_train_source
    from leakpipe.model import create_model
    from leakpipe.monitor.steps import StepProfiler, profile_steps
    from leakpipe.monitor.system import SystemSampler
    from leakpipe.train.fit import configure_torch
    from leakpipe.train.loop import train_one_epoch
    from leakpipe.train.optim import create_optimization

    cfg, runtime = setup.cfg, runtime_for(setup, "fp16")
    configure_torch(cfg, runtime)
    source = make_train_source(setup.train, "device", batch_size, seed=cfg.seed,
                               binary=cfg.binary, device=runtime.device, dtype=STORED,
                               input_norm=cfg.input_norm, augment=cfg.augment)
    info = source.info
    model = runtime.place(create_model(setup.model, len(info.classes)))
    loss = make_loss(setup, info)
    optim = create_optimization(model, cfg, runtime.device, 10_000,
                                scaler_enabled=runtime.scaler)

    def epoch(e: int, batches: Iterable[Any]) -> None:
        train_one_epoch(model, batches, loss, optim, runtime, epoch=e)

    epoch(0, source.epoch(0))                               # warm-up: cuDNN autotuning
    sampler = SystemSampler(SAMPLE_S, gpu=True).start()
    profiler = StepProfiler(sampler)
    steps, e, end = [], 1, time.perf_counter() + setup.seconds
    while not steps or time.perf_counter() < end:
        epoch(e, profiler.wrap(e, source.epoch(e)))
        steps += profiler.finish_epoch(source.wait_times)
        e += 1
    sampler.stop()
    profile = profile_steps(steps, setup.monitor.spike_factor, 0, sampler)
    t0, t1 = steps[0].t, steps[-1].t + steps[-1].seconds
    gpus = [g for s in sampler.snapshot() if t0 <= s.t <= t1 for g in s.gpus]
    synced = synced_steps(source, e, lambda batch: epoch(e, [batch]), runtime.device,
                          setup.seconds)
    return {"batch_size": batch_size, "steps": profile.steps, "epochs": e - 1,
            "host_p50_ms": profile.p50_ms, "host_p99_ms": profile.p99_ms,
            "data_wait_frac": profile.data_wait_frac, "samples_per_s": profile.samples_per_s,
            "synced_p50_ms": statistics.median(synced),
            "synced_p99_ms": float(np.percentile(synced, 99)),
            "gpu_samples": len(gpus),
            "gpu_util_mean": float(np.mean([g.util_percent for g in gpus])) if gpus else None,
            "gpu_util_max": max((g.util_percent for g in gpus), default=None),
            "gpu_mem_mb_max": max((g.mem_used_mb for g in gpus), default=None)}


def synced_steps(source: Any, first_epoch: int, step: Callable[[Any], None],
                 device: torch.device, seconds: float) -> list[float]:
    """Milliseconds of single steps, each ended by a synchronize: SYNCED_STEPS of them or as
    many as ``seconds`` allow (at least one)."""
    times: list[float] = []
    end = time.perf_counter() + seconds
    for e in itertools.count(first_epoch):
        for batch in source.epoch(e):
            sync(device)
            start = time.perf_counter()
            step(batch)
            sync(device)
            times.append(1e3 * (time.perf_counter() - start))
            if len(times) == SYNCED_STEPS or time.perf_counter() > end:
                return times
    return times


def busy(device: torch.device, seconds: float) -> None:
    """Keep the default stream busy for about ``seconds`` (matrix products)."""
    a = torch.randn(2048, 2048, device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a = torch.tanh(a @ a)
        sync(device)
