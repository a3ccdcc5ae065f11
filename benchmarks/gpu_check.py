"""GPU check: every CUDA code path of leakpipe, run once on this machine's GPU in a few minutes.

Why: the test suite and ``make run`` run on CPU-only machines, so the code that only runs on a
GPU (mixed precision with loss scaling, channels_last, fused AdamW, torch.compile, device and
pinned placements with side-stream copies, NVML sampling, DDP over nccl) is otherwise never
executed. Run this on a lent accelerator after changing leakpipe/train, leakpipe/data,
leakpipe/scoring, leakpipe/runtime.py or leakpipe/monitor.

What: a small synthetic train / val split (params.yaml's feature shape, written with
``SplitWriter``; the classes differ in a band of mels so training has something to learn) and
the params.yaml `model`, `train` (1 epoch), `decision`, `evaluate` and `preload` sections. Each
check is one function below; it returns its details or raises, and one failing check never
stops the others:

* ``amp_fp16_fit`` / ``amp_bf16_fit``: ``fit()`` under ``make_runtime("cuda", "fp16" / "bf16",
  True)`` (fp16: ``device`` placement, TrainMonitor probe; bf16: ``ram`` placement): finite
  losses, autocast output dtype, GradScaler state, checkpoints written and readable;
* ``channels_last``: conv weights (also after training steps), the input and the conv
  activations in channels_last; the same outputs as the contiguous model;
* ``fused_adamw``: the optimizer is fused on CUDA, matches unfused AdamW on equal gradients,
  and GradScaler skips a step with non-finite gradients;
* ``compile_fit``: ``fit()`` with ``train.compile: true`` (1 epoch);
* ``placement_device`` / ``placement_ram_pinned``: ``load_resident`` on the GPU, and in pinned
  RAM with side-stream prefetch (``ResidentData.overlap_copies``): training and file-order
  batches identical to the device placement's while the default stream is busy;
* ``nvml_sampling``: ``leakpipe.monitor`` samples GPU utilisation and memory;
* ``ddp_nccl_world1``: ``fit()`` under DistributedDataParallel over nccl with world size 1, in a
  subprocess (leakpipe's ``Distributed`` makes every collective a no-op at world size 1, so the
  check forces them on);
* ``evaluate_batched_vs_per_file``: ``score_batches`` over ``open_batches`` (as the evaluate
  stage) vs a per-file loop, in float32 and fp16: largest probability difference, files/s;
* ``train_step_profile``: GPU utilisation (NVML) during training epochs and the median / p99
  step time, host-side (leakpipe's profiler) and with a ``torch.cuda.synchronize`` per step.

Writes ONE JSON (``--out``; rewritten after each check, so a run that dies leaves what it found):
the machine (torch, CUDA, cuDNN, NCCL, GPU, driver) and per check ``{ok, seconds, details}`` or
``{ok: false, seconds, error}`` (one line). Without CUDA every check is ``{ok: false, skipped:
"no CUDA device"}`` and the exit status is 0, so it is safe to run anywhere; otherwise the exit
status is 1 when a check failed. leakpipe is imported inside
the checks, so a broken module fails only the checks that use it. Without the project's venv
(a bare GPU image): ``PYTHONPATH=. python3 benchmarks/gpu_check.py``. ``--device cpu`` runs the
same code on the CPU, to test this script without a GPU (the CUDA expectations then fail).

    python benchmarks/gpu_check.py [--out benchmarks/results/gpu_check.json] \
        [--train-files 512] [--val-files 128] [--seconds 5] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import itertools
import json
import logging
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger("gpu_check")

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "gpu_check.json"
CPU_OUT = Path(tempfile.gettempdir()) / "gpu_check_cpu.json"   # --device cpu: not a GPU result
NO_CUDA = "no CUDA device"
NOT_RUN = "not run (the run stopped before it)"
SEED = 0
CLIPS_PER_RECORDING = 2
SITES = 4
CLASS_BAND_DB = 8.0        # the synthetic classes differ by this much in a band of mels
STORED = torch.float16     # splits are stored and batched as float16 (the preload default)
SAMPLE_S = 0.1             # NVML / system sampling interval of the checks
FP32_TOL = 1e-3            # batched vs per-file probabilities, float32 (TF32 convolutions)
FP16_TOL = 1e-2            # the same under fp16 autocast
ADAM_TOL = 1e-5            # fused vs unfused AdamW parameters after 3 steps on equal gradients
SYNCED_STEPS = 50          # steps timed one by one with a synchronize each (at most)
DDP_TIMEOUT_S = 300
ERROR_CHARS = 300


class CheckFailed(Exception):
    """A check ran but what it checks does not hold."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# ---------------------------------------------------------------------------------------------
# The shared setup: configs, synthetic splits, fit()
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What every check shares: where the data is and the params sections."""

    root: Path
    train: Path
    val: Path
    device: torch.device
    model: Any      # ModelConfig
    cfg: Any        # TrainConfig, 1 epoch
    decision: Any   # DecisionConfig
    monitor: Any    # MonitorConfig
    evaluate: Any   # EvaluateConfig
    preload: Any    # PreloadConfig
    features: Any   # FeatureConfig
    seconds: float  # per measured stretch of training (train_step_profile)


def load_setup(root: Path, device: torch.device, seconds: float) -> Setup:
    from leakpipe.config import load_section

    cfg = dataclasses.replace(load_section(PARAMS, "train"), epochs=1, compile=False,
                              init_checkpoint="", log_every_steps=0, keep_last_checkpoints=1)
    return Setup(root=root, train=root / "train.h5", val=root / "val.h5", device=device,
                 model=load_section(PARAMS, "model"), cfg=cfg,
                 decision=load_section(PARAMS, "decision"),
                 monitor=load_section(PARAMS, "monitor"),
                 evaluate=load_section(PARAMS, "evaluate"),
                 preload=load_section(PARAMS, "preload"),
                 features=load_section(PARAMS, "build").features, seconds=seconds)


def write_split(path: Path, split: str, features: Any, n_files: int, seed: int) -> None:
    """Random log-mel clips; class c is CLASS_BAND_DB louder in its own band of mels."""
    from leakpipe.constants import KNOWN_CLASSES
    from leakpipe.data.writer import SplitWriter

    rng = np.random.default_rng(seed)
    n_classes, n_mels = len(KNOWN_CLASSES), features.n_mels
    band = max(1, n_mels // n_classes)
    with SplitWriter(path, split, features, KNOWN_CLASSES) as writer:
        for rec in range(max(n_classes, n_files // CLIPS_PER_RECORDING)):
            label = rec % n_classes
            mel = rng.normal(-40.0, 10.0, (CLIPS_PER_RECORDING, *features.segment_shape))
            mel[..., label * band:(label + 1) * band, :] += CLASS_BAND_DB
            writer.append(mel.astype(np.float16), label, f"{split}/rec{rec}",
                          f"{split}-site{rec % SITES}")


def runtime_for(setup: Setup, amp: str, channels_last: bool = True) -> Any:
    from leakpipe.runtime import make_runtime

    return make_runtime(setup.device, amp, channels_last)


def class_counts(info: Any) -> list[int]:
    return np.bincount(info.file_labels, minlength=len(info.classes)).tolist()


def run_fit(setup: Setup, runtime: Any, name: str, *, placement: str, compile: bool = False,
            probe: Any = None, dist: Any = None,
            should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """One epoch of ``fit()`` as the train stage runs it; its figures and checkpoint files."""
    from leakpipe.data.batches import make_eval_batches, make_train_source
    from leakpipe.tracking import NullTracker
    from leakpipe.train import checkpoint as ckpt_io
    from leakpipe.train.distributed import Distributed
    from leakpipe.train.fit import FitOptions, fit
    from leakpipe.train.validation import ValSplit

    cfg = dataclasses.replace(setup.cfg, compile=compile)
    source = make_train_source(
        setup.train, placement, cfg.batch_size, seed=cfg.seed, binary=cfg.binary,
        device=runtime.device, dtype=STORED, leak_oversample=cfg.leak_oversample_factor,
        input_norm=cfg.input_norm, augment=cfg.augment)
    val = ValSplit(make_eval_batches(setup.val, placement, cfg.batch_size, binary=cfg.binary,
                                     device=runtime.device, dtype=STORED,
                                     input_norm=cfg.input_norm))
    directory = setup.root / f"checkpoints-{name}"
    options = FitOptions(probe=probe, dist=dist or Distributed.single(), should_stop=should_stop)
    start = time.perf_counter()
    result = fit(setup.model, cfg, runtime=runtime, decision=setup.decision,
                 train_source=source, val=val, class_counts=class_counts(source.info),
                 tracker=NullTracker(), checkpoint_dir=directory,
                 features=setup.features.to_dict(), options=options)
    seconds = time.perf_counter() - start
    metrics = result.history[-1]
    require(math.isfinite(metrics["train/loss"]), f"train loss {metrics['train/loss']}")
    require(math.isfinite(metrics["val/loss"]), f"val loss {metrics['val/loss']}")
    files = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    require(result.best_checkpoint is not None and bool(ckpt_io.epoch_checkpoints(directory)),
            f"no checkpoint written in {directory} (found {files})")
    ckpt = ckpt_io.load_checkpoint(result.best_checkpoint)
    return {"runtime": runtime.describe(), "placement": placement, "fit_seconds": seconds,
            "train_loss": metrics["train/loss"], "val_loss": metrics["val/loss"],
            "val_file_f1": metrics["val/file_f1"],
            "skipped_steps": metrics["train/skipped_steps"],
            "samples_per_s": metrics["perf/samples_per_s"], "checkpoint_files": files,
            "scaler_state": {k: float(v) for k, v in ckpt["scaler"].items()
                             if isinstance(v, int | float)},
            "metrics": {k: v for k, v in metrics.items() if k.startswith("perf/")},
            "_model": result.model}


def first_batch(setup: Setup, runtime: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """One training batch of the train split (as stored), on the device."""
    from leakpipe.data.resident_source import ResidentSource
    from leakpipe.data.split_info import load_resident

    data = load_resident(setup.train, "ram", runtime.device, binary=setup.cfg.binary)
    x, y, _ = next(iter(ResidentSource(data, setup.cfg.batch_size, seed=SEED)))
    return x, y


def autocast_dtype(model: torch.nn.Module, runtime: Any, x: torch.Tensor) -> str:
    with torch.no_grad(), runtime.autocast():
        logits, _ = model(runtime.to_device(x))
    return str(logits.dtype).removeprefix("torch.")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def public(details: dict[str, Any]) -> dict[str, Any]:
    """``details`` without the entries kept for other checks (names starting with _)."""
    return {k: v for k, v in details.items() if not k.startswith("_")}


# ---------------------------------------------------------------------------------------------
# The checks: each returns its details or raises
# ---------------------------------------------------------------------------------------------


def check_amp_fp16_fit(setup: Setup) -> dict[str, Any]:
    """fp16 autocast + GradScaler through fit(), device placement, monitor probe."""
    from leakpipe.monitor import TrainMonitor

    runtime = runtime_for(setup, "fp16")
    require(runtime.amp and runtime.scaler, f"fp16 runtime is {runtime.describe()}")
    monitor = dataclasses.replace(setup.monitor, enabled=True, gpu=True, interval_s=SAMPLE_S)
    with TrainMonitor(monitor) as probe:
        out = run_fit(setup, runtime, "fp16", placement="device", probe=probe)
    out["autocast_dtype"] = autocast_dtype(out["_model"], runtime, first_batch(setup, runtime)[0])
    require(out["autocast_dtype"] == "float16", f"autocast gave {out['autocast_dtype']}")
    scale = out["scaler_state"].get("scale")
    require(scale is not None and math.isfinite(scale) and scale > 0,
            f"GradScaler state in the checkpoint: {out['scaler_state']}")
    return public(out)


def check_amp_bf16_fit(setup: Setup) -> dict[str, Any]:
    """bf16 autocast (no GradScaler) through fit(), ram placement."""
    if setup.device.type == "cuda":
        require(torch.cuda.is_bf16_supported(), "this GPU does not support bf16")
    runtime = runtime_for(setup, "bf16")
    require(runtime.amp and not runtime.scaler, f"bf16 runtime is {runtime.describe()}")
    out = run_fit(setup, runtime, "bf16", placement="ram")
    out["autocast_dtype"] = autocast_dtype(out["_model"], runtime, first_batch(setup, runtime)[0])
    require(out["autocast_dtype"] == "bfloat16", f"autocast gave {out['autocast_dtype']}")
    require(not out["scaler_state"], f"bf16 saved a GradScaler state {out['scaler_state']}")
    return public(out)


def check_channels_last(setup: Setup) -> dict[str, Any]:
    """Conv weights (also after 3 steps), input and conv activations in channels_last; the
    same logits as the contiguous model."""
    from leakpipe.model import create_model
    from leakpipe.train.loop import train_one_epoch
    from leakpipe.train.optim import create_optimization

    runtime = runtime_for(setup, "off", channels_last=True)
    require(runtime.channels_last, f"runtime is {runtime.describe()}")
    info = train_info(setup)
    torch.manual_seed(SEED)
    model = runtime.place(create_model(setup.model, len(info.classes)))
    plain = copy.deepcopy(model).to(memory_format=torch.contiguous_format)
    conv = [p for p in model.parameters() if p.dim() == 4]
    x, y = first_batch(setup, runtime)
    x_dev = runtime.to_device(x)
    acts = conv_activation_formats(model, x_dev)
    with torch.no_grad():                                   # eval: no dropout
        diff = (model.eval()(x_dev)[0] - plain.eval()(x_dev.contiguous())[0]).abs().max().item()
    details: dict[str, Any] = {
        "conv_params": len(conv), "params_channels_last": all(is_cl(p) for p in conv),
        "input_channels_last": is_cl(x_dev),    # (B, 1, M, 1): trivially both formats
        "conv_activations_channels_last": acts,
        "max_abs_diff_vs_contiguous": diff}
    optim = create_optimization(model, setup.cfg, runtime.device, 10, scaler_enabled=False)
    train_one_epoch(model, [(x, y, torch.zeros_like(y))] * 3, make_loss(setup, info), optim,
                    runtime)
    details["params_channels_last_after_3_steps"] = all(is_cl(p) for p in conv)
    require(details["params_channels_last"], "conv weights are not channels_last")
    require(details["input_channels_last"], "runtime.to_device did not give channels_last")
    require(bool(acts) and all(acts.values()), f"conv activations not channels_last: {acts}")
    require(diff < FP32_TOL, f"channels_last changes the logits by {diff:.3g}")
    require(details["params_channels_last_after_3_steps"],
            "conv weights left channels_last during training")
    return details


def check_fused_adamw(setup: Setup) -> dict[str, Any]:
    """create_optimization fuses AdamW on CUDA; it matches unfused AdamW; GradScaler skips inf."""
    from leakpipe.model import create_model
    from leakpipe.train.optim import create_optimization, param_groups

    runtime, info = runtime_for(setup, "off"), train_info(setup)
    torch.manual_seed(SEED)
    model = runtime.place(create_model(setup.model, len(info.classes)))
    ref = copy.deepcopy(model)
    optim = create_optimization(model, setup.cfg, runtime.device, 10, scaler_enabled=True)
    fused = bool(optim.optimizer.defaults.get("fused"))
    ref_opt = torch.optim.AdamW(param_groups(ref, setup.cfg.weight_decay), fused=False)
    x, y = first_batch(setup, runtime)
    x, loss_fn = runtime.to_device(x), make_loss(setup, info)

    def loss(net: torch.nn.Module) -> torch.Tensor:
        return loss_fn(*net(x), y).total

    for _ in range(3):   # the same gradients for both (cuDNN backward is not deterministic)
        optim.backward(loss(model))
        scale = optim.scaler.get_scale()
        for p, r in zip(model.parameters(), ref.parameters(), strict=True):
            r.grad = p.grad / scale                        # a power of 2: exact
        for g in ref_opt.param_groups:
            g["lr"] = optim.lr
        optim.step(model)                                  # unscale, clip, fused step
        torch.nn.utils.clip_grad_norm_(ref.parameters(), optim.clip_norm)
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
    diff = max((a - b).abs().max().item()
               for a, b in zip(model.parameters(), ref.parameters(), strict=True))
    before = [p.detach().clone() for p in model.parameters()]
    scale = optim.scaler.get_scale()
    optim.backward(loss(model) * float("inf"))
    norm = optim.step(model)
    unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    details = {"fused": fused, "max_abs_diff_vs_unfused_3_steps": diff,
               "inf_step_grad_norm": float(norm), "inf_step_skipped": unchanged,
               "scale_before": scale, "scale_after": optim.scaler.get_scale()}
    require(fused, "create_optimization did not fuse AdamW on this device")
    require(diff < ADAM_TOL, f"fused AdamW differs from unfused by {diff:.3g}")
    require(unchanged, "a step with non-finite gradients changed the parameters")
    require(details["scale_after"] < scale, "GradScaler did not lower its scale after inf")
    return details


def check_compile_fit(setup: Setup) -> dict[str, Any]:
    """fit() with train.compile: true (fp16, device placement): an epoch runs, no fallback."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    out = run_fit(setup, runtime_for(setup, "fp16"), "compile", placement="device",
                  compile=True)
    counters = torch._dynamo.utils.counters
    out["compile_mode"] = setup.cfg.compile_mode
    out["graph_breaks"] = sum(counters["graph_break"].values())
    out["unique_graphs"] = counters["stats"].get("unique_graphs", 0)
    require(out["unique_graphs"] > 0, "torch.compile compiled no graph")
    return public(out)


def check_placement_device(setup: Setup) -> dict[str, Any]:
    """load_resident on the GPU: training and file-order batches come from device memory."""
    from leakpipe.data.file_order import FileOrderBatches
    from leakpipe.data.resident_source import ResidentSource
    from leakpipe.data.split_info import load_resident

    data = load_resident(setup.train, "device", setup.device, binary=setup.cfg.binary)
    require(data.segments.device.type == "cuda", f"segments on {data.segments.device}")
    require(not data.overlap_copies, "device placement should need no copies")
    train = ResidentSource(data, setup.cfg.batch_size, seed=SEED)
    files = FileOrderBatches(data, setup.cfg.batch_size)
    rate_train, n_train = drain_rate(train, setup.device)
    rate_files, n_files = drain_rate(files, setup.device)
    return {"segments": int(data.segments.shape[0]), "segments_device": str(data.segments.device),
            "train_batches": n_train, "train_segments_per_s": rate_train,
            "file_order_batches": n_files, "file_order_segments_per_s": rate_files}


def check_placement_ram_pinned(setup: Setup) -> dict[str, Any]:
    """Pinned RAM + side-stream prefetch: the same batches as the device placement while the
    default stream is kept busy (a missing stream wait or record_stream shows as a mismatch)."""
    from leakpipe.data.file_order import FileOrderBatches
    from leakpipe.data.resident_source import ResidentSource
    from leakpipe.data.split_info import load_resident, read_split_info

    ram = load_resident(setup.train, "ram", setup.device, binary=setup.cfg.binary)
    dev = load_resident(setup.train, "device", setup.device, binary=setup.cfg.binary)
    source = ResidentSource(ram, setup.cfg.batch_size, seed=SEED)
    details = {"pinned": ram.segments.is_pinned(), "overlap_copies": ram.overlap_copies,
               "side_stream": getattr(source._feed, "stream", None) is not None}
    require(details["pinned"], "ram placement on CUDA is not pinned")
    require(details["overlap_copies"] and details["side_stream"], f"no side stream: {details}")
    train = compare_batches(source, ResidentSource(dev, setup.cfg.batch_size, seed=SEED),
                            setup.device)
    stream_info = read_split_info(setup.train, setup.cfg.binary)
    files = compare_batches(FileOrderBatches(ram, setup.cfg.batch_size),
                            FileOrderBatches(dev, setup.cfg.batch_size), setup.device)
    streamed = compare_batches(FileOrderBatches(stream_info, setup.cfg.batch_size,
                                                device=setup.device),
                               FileOrderBatches(dev, setup.cfg.batch_size), setup.device)
    details.update(train_batches=train, file_order_batches=files, stream_file_order=streamed)
    for name in ("train_batches", "file_order_batches", "stream_file_order"):
        require(details[name]["mismatches"] == 0, f"{name}: {details[name]}")
    rate, _ = drain_rate(source, setup.device)
    details["train_segments_per_s"] = rate
    details["mean_wait_ms"] = 1e3 * float(np.mean(source.wait_times)) if source.wait_times \
        else 0.0
    return details


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


def check_ddp_nccl_world1(setup: Setup) -> dict[str, Any]:
    """fit() under DDP (nccl) with world size 1, in a fresh process with torchrun's variables."""
    out = setup.root / "ddp.json"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    cmd = [sys.executable, __file__, "--ddp-worker", str(out), "--data-dir", str(setup.root),
           "--device", setup.device.type]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=DDP_TIMEOUT_S)
    if not out.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CheckFailed(f"worker exited {proc.returncode} without a result: {tail[0]}")
    result = json.loads(out.read_text())
    if not result.get("ok"):
        raise CheckFailed(f"worker: {result.get('error')}")
    return result["details"]


def check_evaluate_batched_vs_per_file(setup: Setup) -> dict[str, Any]:
    """score_batches over open_batches (as `leakpipe evaluate`) vs one forward pass per file."""
    from leakpipe.inference import inference_form
    from leakpipe.model import create_model
    from leakpipe.scoring.batching import BatchLimits

    torch.manual_seed(SEED)
    n_frames = setup.features.segment_shape[-1]
    model = create_model(setup.model, len(train_info(setup).classes)).to(setup.device).eval()
    net = inference_form(model, n_frames).to(setup.device)
    limits = BatchLimits(max_segments=setup.evaluate.max_batch_segments,
                         cpu_max_segments=setup.evaluate.cpu_max_batch_segments,
                         safety=setup.preload.safety,
                         host_reserve_mb=setup.preload.host_reserve_mb,
                         device_reserve_mb=setup.preload.device_reserve_mb)
    details: dict[str, Any] = {}
    for amp, tol in (("off", FP32_TOL), ("fp16", FP16_TOL)):
        details[amp] = batched_vs_per_file(setup, net, runtime_for(setup, amp), limits)
        details[amp]["tolerance"] = tol
    for amp in ("off", "fp16"):
        got = details[amp]
        require(got["max_abs_diff"] <= got["tolerance"],
                f"amp {amp}: batched and per-file probabilities differ by "
                f"{got['max_abs_diff']:.3g}")
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


CHECKS: dict[str, Callable[[Setup], dict[str, Any]]] = {
    "amp_fp16_fit": check_amp_fp16_fit,
    "amp_bf16_fit": check_amp_bf16_fit,
    "channels_last": check_channels_last,
    "fused_adamw": check_fused_adamw,
    "compile_fit": check_compile_fit,
    "placement_device": check_placement_device,
    "placement_ram_pinned": check_placement_ram_pinned,
    "nvml_sampling": check_nvml_sampling,
    "ddp_nccl_world1": check_ddp_nccl_world1,
    "evaluate_batched_vs_per_file": check_evaluate_batched_vs_per_file,
    "train_step_profile": check_train_step_profile,
}


# ---------------------------------------------------------------------------------------------
# Helpers of the checks
# ---------------------------------------------------------------------------------------------


def train_info(setup: Setup) -> Any:
    """The train split's ``SplitInfo`` (classes, labels, shapes)."""
    from leakpipe.data.split_info import read_split_info

    return read_split_info(setup.train, setup.cfg.binary)


def make_loss(setup: Setup, info: Any) -> Any:
    """The train stage's loss for ``info``'s classes, on the setup's device."""
    from leakpipe.train.losses import LossConfig, build_loss

    return build_loss(LossConfig.from_train(setup.cfg), class_counts(info), info.leak_label,
                      setup.device)


def is_cl(t: torch.Tensor) -> bool:
    return t.is_contiguous(memory_format=torch.channels_last)


def conv_activation_formats(model: torch.nn.Module, x: torch.Tensor) -> dict[str, bool]:
    """Whether each Conv2d's output (more than one channel) is channels_last."""
    formats: dict[str, bool] = {}
    hooks = [m.register_forward_hook(
        lambda _m, _i, out, name=name: formats.__setitem__(name, is_cl(out)))
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Conv2d) and m.out_channels > 1]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return formats


def drain_rate(batches: Iterable[Any], device: torch.device) -> tuple[float, int]:
    """Segments per second of one pass over ``batches`` (nothing computed on them)."""
    sync(device)
    start, segments, n = time.perf_counter(), 0, 0
    for x, _, _ in batches:
        segments, n = segments + len(x), n + 1
    sync(device)
    return segments / max(time.perf_counter() - start, 1e-9), n


def busy(device: torch.device, seconds: float) -> None:
    """Keep the default stream busy for about ``seconds`` (matrix products)."""
    a = torch.randn(2048, 2048, device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a = torch.tanh(a @ a)
        sync(device)


def compare_batches(got: Iterable[Any], want: Iterable[Any],
                    device: torch.device) -> dict[str, int]:
    """Batch-by-batch equality of two passes; the default stream busy while ``got`` copies."""
    a = torch.randn(1024, 1024, device=device)
    mismatches = n = 0
    for (x, y, f), (x2, y2, f2) in itertools.zip_longest(got, want, fillvalue=(None,) * 3):
        n += 1
        if x is None or x2 is None:
            mismatches += 1
            continue
        for _ in range(4):
            a = torch.tanh(a @ a)          # queued before this batch is read
        same = torch.equal(x, x2) and torch.equal(y, y2) and torch.equal(f, f2)
        mismatches += 0 if same else 1
    sync(device)
    return {"batches": n, "mismatches": mismatches}


def batched_vs_per_file(setup: Setup, net: torch.nn.Module, runtime: Any,
                        limits: Any) -> dict[str, Any]:
    """Probabilities and files/s of score_batches (evaluate's call) and of a per-file loop."""
    import h5py

    from leakpipe.constants import H5_MEL
    from leakpipe.data.input_norm import normalize_segments
    from leakpipe.decision.voting import segment_leak_prob
    from leakpipe.scoring.batching import open_batches
    from leakpipe.scoring.score import score_batches

    norm = setup.cfg.input_norm
    batches = open_batches(setup.val, "device", setup.model, runtime.device, limits,
                           setup.cfg.binary, norm)
    info = batches.info

    def batched() -> Any:
        return score_batches(net, batches, segments=tuple(info.segment_shape[:2]),
                             leak_index=info.leak_label, prob_mode=setup.decision.prob_mode,
                             runtime=runtime, progress=False, desc="evaluate val",
                             total=len(batches))

    def per_file() -> np.ndarray:
        out = []
        with h5py.File(setup.val, "r") as f, torch.inference_mode():
            mel = f[H5_MEL]
            for i in range(info.n_files):
                x = torch.from_numpy(mel[i]).reshape(-1, 1, *info.mel_shape)
                x = normalize_segments(x.to(runtime.device), info.segments_per_file, norm)
                with runtime.autocast():
                    logits, leak_logit = net(runtime.to_device(x))
                prob = segment_leak_prob(logits, leak_logit, info.leak_label,
                                         setup.decision.prob_mode)
                out.append(prob.cpu().numpy())
        return np.stack(out).reshape(info.n_files, *info.segment_shape[:2])

    batched(), per_file()                                   # warm-up: cuDNN autotuning
    t0 = time.perf_counter()
    scores = batched()
    t1 = time.perf_counter()
    loop = per_file()
    t2 = time.perf_counter()
    return {"runtime": runtime.describe(), "files": info.n_files,
            "files_per_batch": batches.files_per_batch,
            "max_abs_diff": float(np.abs(scores.seg_probs - loop).max()),
            "batched_files_per_s": info.n_files / (t1 - t0),
            "per_file_files_per_s": info.n_files / (t2 - t1),
            "speedup": (t2 - t1) / (t1 - t0)}


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------
# The DDP worker (a subprocess of ddp_nccl_world1)
# ---------------------------------------------------------------------------------------------


def ddp_worker(out: Path, data_dir: Path, device: torch.device) -> int:
    """Join a process group of one (nccl on CUDA), run fit() under DDP, write ``out``."""
    try:
        details = ddp_fit(data_dir, device)
        result: dict[str, Any] = {"ok": True, "details": details}
    except Exception as exc:  # noqa: BLE001  (reported in the parent's JSON, never raised)
        traceback.print_exc()
        result = {"ok": False, "error": one_line(exc)}
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


def ddp_fit(data_dir: Path, device: torch.device) -> dict[str, Any]:
    import torch.distributed as tdist

    from leakpipe.train import distributed

    wrapped: list[str] = []

    class WorldOfOne(distributed.Distributed):
        """Every collective really runs at world size 1, and wrap() records what it made."""

        @property
        def enabled(self) -> bool:
            return True

        def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
            model = super().wrap(model)
            wrapped.append(type(model).__name__)
            return model

    backend = distributed.BACKEND_CUDA if device.type == "cuda" else distributed.BACKEND_CPU
    from_env = distributed.from_env(device)              # torchrun's rule: world 1 = single
    tdist.init_process_group(backend, init_method="env://", timeout=distributed.TIMEOUT)
    dist = WorldOfOne(rank=0, world_size=1, local_rank=0, backend=backend)
    try:
        setup = load_setup(data_dir, device, seconds=0.0)
        out = run_fit(setup, runtime_for(setup, "fp16" if device.type == "cuda" else "off"),
                      "ddp", placement="device" if device.type == "cuda" else "ram",
                      dist=dist, should_stop=lambda: False)
        total = torch.ones(1, device=dist.device(device))
        tdist.all_reduce(total)
        out.update(backend=tdist.get_backend(), world_size=tdist.get_world_size(),
                   from_env_at_world_1=("single" if not from_env.enabled else "distributed"),
                   wrapped=wrapped, all_reduce=float(total.item()))
        require(wrapped == ["DistributedDataParallel"], f"fit wrapped the model as {wrapped}")
        require(out["all_reduce"] == 1.0, f"all_reduce of 1 gave {out['all_reduce']}")
    finally:
        dist.close()
    return public(out)


# ---------------------------------------------------------------------------------------------
# Running the checks, the machine, the JSON
# ---------------------------------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message (at file:line)``, at most ERROR_CHARS characters."""
    text = str(exc).strip().splitlines()
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    line = f"{type(exc).__name__}: {text[0] if text else ''}{where}"
    return line[:ERROR_CHARS]


def run_check(name: str, check: Callable[[Setup], dict[str, Any]],
              setup: Setup) -> dict[str, Any]:
    """Run one check; any exception becomes {ok: false, error} and the run goes on."""
    log.info("[ .. ] %s", name)
    start = time.perf_counter()
    try:
        details = check(setup)
        entry = {"ok": True, "seconds": round(time.perf_counter() - start, 3),
                 "details": details}
    except Exception as exc:  # noqa: BLE001  (one failing check never stops the others)
        log.debug("%s", traceback.format_exc())
        entry = {"ok": False, "seconds": round(time.perf_counter() - start, 3),
                 "error": one_line(exc)}
    finally:
        sync_quietly(setup.device)
    log.info("[%s] %s %.1f s%s", " ok " if entry["ok"] else "FAIL", name, entry["seconds"],
             "" if entry["ok"] else f": {entry['error']}")
    return entry


def sync_quietly(device: torch.device) -> None:
    """Finish queued work and return cached memory so the next check starts clean."""
    try:
        sync(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001  (a broken CUDA context shows in the next checks)
        log.warning("CUDA synchronize failed after a check: %s", sys.exc_info()[1])


def machine_facts(device: torch.device) -> dict[str, Any]:
    facts: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "cuda_runtime": torch.version.cuda, "cpus": os.cpu_count(),
                             "cuda_available": torch.cuda.is_available(),
                             "device": str(device)}
    if device.type != "cuda" or not torch.cuda.is_available():
        return facts
    props = torch.cuda.get_device_properties(device)
    facts.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                 gpu_memory_mib=props.total_memory // 2**20,
                 multiprocessors=props.multi_processor_count,
                 cudnn=torch.backends.cudnn.version(), bf16=torch.cuda.is_bf16_supported())
    try:
        facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # noqa: BLE001  (a fact, not a check)
        facts["nccl"] = f"unknown ({one_line(exc)})"
    facts["driver"] = driver_version()
    return facts


def driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception as exc:  # noqa: BLE001  (a fact, not a check)
        return f"unknown ({one_line(exc)})"


def skipped(reason: str) -> dict[str, Any]:
    return {"ok": False, "seconds": 0.0, "skipped": reason}


class Report:
    """The one JSON: machine, settings, every check; rewritten after each check, so a run that
    dies (a crash in a CUDA library, a killed process) still leaves what it found."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.out, self.started = args.out, time.perf_counter()
        self.head = {"machine": machine_facts(device),
                     "settings": {"train_files": args.train_files, "val_files": args.val_files,
                                  "seconds": args.seconds, "device": args.device}}
        self.checks = {name: skipped(NOT_RUN) for name in CHECKS}

    def record(self, name: str, entry: dict[str, Any]) -> None:
        self.checks[name] = entry
        self.write()

    @property
    def summary(self) -> dict[str, Any]:
        entries = self.checks.values()
        return {"passed": sum(c["ok"] for c in entries),
                "failed": sum("error" in c for c in entries),
                "skipped": sum("skipped" in c for c in entries),
                "seconds": round(time.perf_counter() - self.started, 1)}

    def write(self) -> None:
        result = {**self.head, "checks": self.checks, "summary": self.summary}
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(result, indent=2, default=str) + "\n")


def run_all(args: argparse.Namespace, device: torch.device, report: Report) -> None:
    """Write the synthetic splits, then run the selected checks in order."""
    selected = args.only or list(CHECKS)
    for name in CHECKS:
        if name not in selected:
            report.record(name, skipped("not selected (--only)"))
    with tempfile.TemporaryDirectory(prefix="leakpipe-gpu-check-") as tmp:
        root = Path(tmp)
        try:
            setup = load_setup(root, device, args.seconds)
            write_split(setup.train, "train", setup.features, args.train_files, seed=SEED)
            write_split(setup.val, "val", setup.features, args.val_files, seed=SEED + 1)
        except Exception as exc:  # noqa: BLE001  (every check then reports the same cause)
            log.exception("setup failed")
            for name in selected:
                report.record(name, {"ok": False, "seconds": 0.0,
                                     "error": f"setup: {one_line(exc)}"})
            return
        for name in selected:
            report.record(name, run_check(name, CHECKS[name], setup))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the JSON to write (default {DEFAULT_OUT.relative_to(REPO)}; "
                             f"with --device cpu {CPU_OUT})")
    parser.add_argument("--train-files", type=int, default=512,
                        help="clips in the synthetic train split")
    parser.add_argument("--val-files", type=int, default=128,
                        help="clips in the synthetic val split")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="seconds of profiled training per batch size (train_step_profile)")
    parser.add_argument("--only", nargs="+", choices=list(CHECKS), metavar="NAME",
                        help=f"run only these checks: {', '.join(CHECKS)}")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu runs every check's code on the CPU to test this script "
                             "without a GPU (CUDA-only expectations then fail; no GPU check)")
    parser.add_argument("--ddp-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = CPU_OUT if args.device == "cpu" else DEFAULT_OUT
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("leakpipe").setLevel(logging.WARNING)
    device = torch.device(args.device)
    if args.ddp_worker is not None:
        return ddp_worker(args.ddp_worker, args.data_dir, device)
    report = Report(args, device)
    if device.type == "cuda" and not torch.cuda.is_available():
        log.info("no CUDA device: every check skipped")
        for name in CHECKS:
            report.record(name, skipped(NO_CUDA))
    else:
        run_all(args, device, report)
    summary = report.summary
    log.info("passed %d, failed %d, skipped %d -> %s", summary["passed"], summary["failed"],
             summary["skipped"], args.out)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
