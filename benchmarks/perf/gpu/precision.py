"""Mixed precision and training's CUDA-only fast paths: fp16 autocast with GradScaler and
bf16 through fit(), channels_last, fused AdamW (and GradScaler skipping a non-finite step),
torch.compile.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import torch

from benchmarks.perf.gpu.common import (
    ADAM_TOL,
    FP32_TOL,
    SAMPLE_S,
    SEED,
    Setup,
    autocast_dtype,
    first_batch,
    make_loss,
    public,
    require,
    run_fit,
    runtime_for,
    train_info,
)


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
