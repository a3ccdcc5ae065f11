"""GPU check: every CUDA code path of leakpipe, run once on this machine's GPU in a few minutes.

Why: the test suite and ``make run`` run on CPU-only machines, so the code that only runs on a
GPU (mixed precision with loss scaling, channels_last, fused AdamW, torch.compile, device and
pinned placements with side-stream copies, NVML sampling, DDP over nccl) is otherwise never
executed. Run this on a lent accelerator after changing leakpipe/train, leakpipe/data,
leakpipe/scoring, leakpipe/runtime.py or leakpipe/monitor.

What: a small synthetic train / val split (params.yaml's feature shape, written with
``SplitWriter``; the classes differ in a band of mels so training has something to learn) and
the params.yaml `model`, `train` (1 epoch), `decision`, `evaluate` and `preload` sections. Each
check is one function in ``benchmarks/perf/gpu/`` (a module per group: ``precision``,
``placement``, ``monitoring``, ``ddp``, ``scoring``; the shared setup in ``common``, the
JSON in ``report``); it returns its details or raises, and one failing check never stops
the others:

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
(a bare GPU image): ``PYTHONPATH=. python3 benchmarks/perf/gpu_check.py``. ``--device cpu`` runs the
same code on the CPU, to test this script without a GPU (the CUDA expectations then fail).

    python benchmarks/perf/gpu_check.py [--out benchmarks/results/gpu_check.json] \
        [--train-files 512] [--val-files 128] [--seconds 5] [--only NAME ...]

Figures: docs/results/performance.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))   # benchmarks.perf.gpu; leakpipe too without the venv

from benchmarks.perf.gpu.common import SEED, Setup, load_setup, one_line, write_split  # noqa: E402
from benchmarks.perf.gpu.ddp import check_ddp_nccl_world1, ddp_worker  # noqa: E402
from benchmarks.perf.gpu.monitoring import check_nvml_sampling, check_train_step_profile  # noqa: E402
from benchmarks.perf.gpu.placement import (  # noqa: E402
    check_placement_device,
    check_placement_ram_pinned,
)
from benchmarks.perf.gpu.precision import (  # noqa: E402
    check_amp_bf16_fit,
    check_amp_fp16_fit,
    check_channels_last,
    check_compile_fit,
    check_fused_adamw,
)
from benchmarks.perf.gpu.report import NO_CUDA, Report, run_check, skipped  # noqa: E402
from benchmarks.perf.gpu.scoring import check_evaluate_batched_vs_per_file  # noqa: E402

log = logging.getLogger("gpu_check")

DEFAULT_OUT = REPO / "benchmarks" / "results" / "gpu_check.json"
CPU_OUT = Path(tempfile.gettempdir()) / "gpu_check_cpu.json"   # --device cpu: not a GPU result

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
    report = Report(args, device, CHECKS)
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
