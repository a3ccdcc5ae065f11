"""fit() under DistributedDataParallel over nccl at world size 1, in a subprocess with
torchrun's variables: the worker is ``gpu_check.py --ddp-worker`` (the same command line),
and leakpipe's ``Distributed`` is made to run every collective (at world size 1 it would
make them no-ops).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from benchmarks.perf.gpu.common import (
    DDP_TIMEOUT_S,
    CheckFailed,
    Setup,
    load_setup,
    one_line,
    public,
    require,
    run_fit,
    runtime_for,
)

ENTRY = Path(__file__).resolve().parents[1] / "gpu_check.py"   # runs ddp_worker


def check_ddp_nccl_world1(setup: Setup) -> dict[str, Any]:
    """fit() under DDP (nccl) with world size 1, in a fresh process with torchrun's variables."""
    out = setup.root / "ddp.json"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    cmd = [sys.executable, str(ENTRY), "--ddp-worker", str(out), "--data-dir", str(setup.root),
           "--device", setup.device.type]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=DDP_TIMEOUT_S)
    if not out.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CheckFailed(f"worker exited {proc.returncode} without a result: {tail[0]}")
    result = json.loads(out.read_text())
    if not result.get("ok"):
        raise CheckFailed(f"worker: {result.get('error')}")
    return result["details"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
