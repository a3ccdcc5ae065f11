"""Evaluation on the GPU: score_batches over open_batches (as `leakpipe evaluate`) against
one forward pass per file, in float32 and under fp16 autocast.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from benchmarks.perf.gpu.common import (
    FP16_TOL,
    FP32_TOL,
    SEED,
    Setup,
    require,
    runtime_for,
    train_info,
)


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
