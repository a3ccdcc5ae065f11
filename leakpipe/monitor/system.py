"""System sampling: host CPU / RAM, this process's RSS and, per visible GPU, NVML readings.

``SystemSampler`` is a daemon thread that appends a ``SystemSample`` every ``interval_s``
seconds (psutil for the host and the process, nvidia-ml-py for the GPUs). No library, no driver
or no GPU gives a CPU-only profile, never a crash.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import psutil

log = logging.getLogger(__name__)

MIB = 2**20
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class GpuSample:
    index: int
    util_percent: float
    mem_used_mb: float
    mem_total_mb: float


@dataclass(frozen=True)
class SystemSample:
    t: float                   # seconds since the monitor started
    cpu_percent: float         # host CPU utilisation, all cores
    ram_used_percent: float    # host RAM in use
    rss_mb: float              # this process's resident memory
    gpus: tuple[GpuSample, ...] = ()


class Nvml:
    """GPU utilisation and memory through NVML; ``available`` is False without a usable GPU."""

    def __init__(self) -> None:
        self.note = ""
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        try:
            import pynvml
        except ImportError:
            self.note = "nvidia-ml-py not installed"
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i))
                             for i in _visible_indices(count)]
        except pynvml.NVMLError as exc:
            self.note = f"NVML unavailable ({exc})"
            return
        self._nvml = pynvml

    @property
    def available(self) -> bool:
        return self._nvml is not None and bool(self._handles)

    def read(self) -> tuple[GpuSample, ...]:
        if not self.available:
            return ()
        try:
            return tuple(self._sample(i, h) for i, h in self._handles)
        except self._nvml.NVMLError as exc:
            log.debug("NVML read failed: %s", exc)
            return ()

    def _sample(self, index: int, handle: Any) -> GpuSample:
        util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return GpuSample(index, float(util.gpu), mem.used / MIB, mem.total / MIB)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("NVML shutdown failed: %s", exc)
            self._nvml = None


def _visible_indices(count: int) -> list[int]:
    """NVML indices that ``CUDA_VISIBLE_DEVICES`` lets torch see (all when not integers)."""
    visible = os.environ.get(VISIBLE_DEVICES)
    if visible is None:
        return list(range(count))
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    if not all(v.isdigit() for v in wanted):
        return list(range(count))
    return [int(v) for v in wanted if int(v) < count]


class SystemSampler:
    """A background thread appending a ``SystemSample`` every ``interval_s`` seconds."""

    def __init__(self, interval_s: float, gpu: bool = True) -> None:
        self.interval_s = interval_s
        self.samples: list[SystemSample] = []
        self.start_time = time.perf_counter()
        self._nvml = Nvml() if gpu else None
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="leakpipe-monitor", daemon=True)

    @property
    def gpu_note(self) -> str:
        if self._nvml is None:
            return "GPU sampling off"
        return "" if self._nvml.available else self._nvml.note or "no GPU"

    def start(self) -> SystemSampler:
        psutil.cpu_percent(None)              # the first call only sets the reference point
        self._thread.start()
        return self

    def now(self) -> float:
        return time.perf_counter() - self.start_time

    def sample(self) -> SystemSample:
        """Take one sample now (also called by the thread)."""
        memory = psutil.virtual_memory()
        gpus = self._nvml.read() if self._nvml is not None else ()
        return SystemSample(self.now(), float(psutil.cpu_percent(None)), float(memory.percent),
                            self._process.memory_info().rss / MIB, gpus)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            sample = self.sample()
            with self._lock:
                self.samples.append(sample)

    def snapshot(self) -> list[SystemSample]:
        with self._lock:
            return list(self.samples)

    def nearest(self, t: float) -> SystemSample | None:
        """The sample closest in time to ``t`` (seconds since start)."""
        samples = self.snapshot()
        if not samples:
            return None
        times = [s.t for s in samples]
        i = bisect.bisect_left(times, t)
        near = [j for j in (i - 1, i) if 0 <= j < len(samples)]
        return samples[min(near, key=lambda j: abs(times[j] - t))]

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._nvml is not None:
            self._nvml.close()
