"""How much memory training may use here: host RAM, the cgroup limit, free memory per GPU.

* Host: ``psutil.virtual_memory().available``, lowered to the cgroup's headroom when the
  process runs under a memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``; reclaimable
  page cache, ``inactive_file``, does not count as used).
* GPUs: free memory per visible device from NVML (nvidia-ml-py), honouring
  ``CUDA_VISIBLE_DEVICES``; no library, no driver or no device simply means "no GPU". The
  ``device`` placement also needs torch to see CUDA.
* Usable = free x ``safety`` - reserve (``preload`` params), never below zero. Every rank keeps a
  full copy of a resident split, so a GPU's usable memory is the smallest over the GPUs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

MIB = 2**20
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
UNLIMITED = 2**60  # cgroup v1 reports "no limit" as a huge number
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    total: int
    free: int


@dataclass(frozen=True)
class Budget:
    """Free memory measured now (bytes)."""

    host_available: int
    cgroup_limit: int | None
    cgroup_usage: int | None
    gpus: tuple[GpuMemory, ...]
    cuda: bool      # torch can use CUDA (the device placement needs it)
    gpu_note: str   # why there is no usable GPU ("" when there is one)

    @property
    def host_free(self) -> int:
        if self.cgroup_limit is None:
            return self.host_available
        headroom = self.cgroup_limit - (self.cgroup_usage or 0)
        return max(0, min(self.host_available, headroom))

    @property
    def device_free(self) -> int:
        """Free bytes on the tightest GPU (0 without a usable GPU)."""
        return min((g.free for g in self.gpus), default=0) if self.cuda else 0

    def host_usable(self, safety: float, reserve_mb: float) -> int:
        return max(0, int(self.host_free * safety - reserve_mb * MIB))

    def device_usable(self, safety: float, reserve_mb: float) -> int:
        if not self.cuda or not self.gpus:
            return 0
        return max(0, int(self.device_free * safety - reserve_mb * MIB))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["gpus"] = [asdict(g) for g in self.gpus]
        out["host_free"] = self.host_free
        out["device_free"] = self.device_free
        return out


def measure_budget() -> Budget:
    """Measure host, cgroup and GPU memory now."""
    limit, usage = cgroup_memory()
    gpus, note = gpu_memory()
    cuda = torch_cuda_available()
    if gpus and not cuda:
        note = "NVML sees a GPU but torch has no CUDA support"
    return Budget(host_available=int(psutil.virtual_memory().available), cgroup_limit=limit,
                  cgroup_usage=usage, gpus=gpus, cuda=cuda and bool(gpus), gpu_note=note)


def torch_cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


# -- cgroups -------------------------------------------------------------------------------


def cgroup_memory(root: Path = CGROUP_ROOT,
                  proc_cgroup: Path = PROC_CGROUP) -> tuple[int | None, int | None]:
    """(limit, usage without reclaimable cache) of the tightest memory cgroup, or (None, None)."""
    if (root / "cgroup.controllers").exists():
        return _cgroup_v2(root, _own_path(proc_cgroup))
    v1 = root / "memory"
    limit = _read_int(v1 / "memory.limit_in_bytes")
    if limit is None or limit >= UNLIMITED:
        return None, None
    usage = _read_int(v1 / "memory.usage_in_bytes") or 0
    inactive = _stat(v1 / "memory.stat").get("total_inactive_file", 0)
    return limit, max(0, usage - inactive)


def _own_path(proc_cgroup: Path) -> str:
    """This process's cgroup v2 path ("0::/a/b" -> "a/b"), "" when unknown."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        if line.startswith("0::"):
            return line[3:].strip().lstrip("/")
    return ""


def _cgroup_v2(root: Path, own: str) -> tuple[int | None, int | None]:
    """The smallest ``memory.max`` from this process's cgroup up to the root."""
    folder = root / own if own and (root / own).is_dir() else root
    best: tuple[int | None, int | None] = (None, None)
    while True:
        limit = _read_int(folder / "memory.max")
        if limit is not None and (best[0] is None or limit < best[0]):
            usage = _read_int(folder / "memory.current") or 0
            inactive = _stat(folder / "memory.stat").get("inactive_file", 0)
            best = (limit, max(0, usage - inactive))
        if folder == root or root not in folder.parents:
            return best
        folder = folder.parent


def _read_int(path: Path) -> int | None:
    """An integer file; "max", a missing or unreadable file -> None."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split() for line in lines)
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


# -- GPUs ----------------------------------------------------------------------------------


def gpu_memory() -> tuple[tuple[GpuMemory, ...], str]:
    """Free memory of each visible GPU via NVML, and why there is none ("" if there is)."""
    visible = os.environ.get(VISIBLE_DEVICES)
    if visible is not None and not visible.strip():
        return (), f"{VISIBLE_DEVICES} is empty"
    try:
        import pynvml
    except ImportError:
        return (), "no GPU (nvidia-ml-py not installed)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return (), f"no GPU ({exc})"
    try:
        gpus = tuple(_device(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount()))
    except pynvml.NVMLError as exc:
        return (), f"no GPU (NVML: {exc})"
    finally:
        pynvml.nvmlShutdown()
    gpus = _visible(gpus, visible)
    return gpus, "" if gpus else "no GPU"


def _device(pynvml: Any, index: int) -> GpuMemory:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    info = pynvml.nvmlDeviceGetMemoryInfo(handle)
    name = pynvml.nvmlDeviceGetName(handle)
    name = name.decode() if isinstance(name, bytes) else str(name)
    return GpuMemory(index=index, name=name, total=int(info.total), free=int(info.free))


def _visible(gpus: tuple[GpuMemory, ...], visible: str | None) -> tuple[GpuMemory, ...]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` lets torch see (integer indices; others: all)."""
    if visible is None:
        return gpus
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    if not all(v.isdigit() for v in wanted):
        return gpus  # UUIDs / MIG names: NVML indices cannot be matched, keep every GPU
    by_index = {g.index: g for g in gpus}
    return tuple(by_index[int(v)] for v in wanted if int(v) in by_index)
