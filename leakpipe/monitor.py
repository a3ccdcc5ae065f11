"""Training diagnostics: system / GPU sampling and the step-time profile (``monitor`` params).

Nothing here is woven through the training loop: ``TrainMonitor`` is handed to ``fit`` as its
probe, wraps each epoch's batch iterator and reports per-epoch metrics.

* ``SystemSampler``: a daemon thread that samples, every ``interval_s``, the host CPU % and
  RAM (psutil), this process's RSS and, per visible GPU, utilisation % and memory (NVML via
  nvidia-ml-py). No library, no driver or no GPU gives a CPU-only profile, never a crash.
* ``StepProfiler``: times every step from the request of its batch to the request of the next
  one; the data wait is the time inside the request (the sources' own ``wait_times`` when they
  have them). Per epoch: p50 / p99 step time, data-wait fraction, throughput, and the spikes
  (steps over ``spike_factor`` x the median) with the system sample nearest that moment.
* ``write_profile``: the whole time series as JSON plus a PNG plot (matplotlib, Agg).

On CUDA the loop does not synchronise per step, so a step time is the host-side time between
batch requests; kernel queues even it out, so p50 and throughput hold, single steps may not.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from leakpipe.config import MonitorConfig

log = logging.getLogger(__name__)

MIB = 2**20
PERCENTILE_P50, PERCENTILE_P99 = 50, 99
MAX_STEP_POINTS = 50_000           # per-step points kept in the profile (evenly thinned above)
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
PROFILE_JSON = "profile.json"
PROFILE_PNG = "profile.png"
FIGURE_SIZE = (10.0, 8.0)          # inches
FIGURE_DPI = 100


# -- system sampling ---------------------------------------------------------------------------

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


# -- step profile ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    epoch: int
    index: int        # step within this process's part of the epoch
    t: float          # start, seconds since the monitor started
    seconds: float    # batch request to the next batch request
    wait: float       # seconds waiting for the batch
    size: int         # segments in the batch


@dataclass(frozen=True)
class Spike:
    step: Step
    over_median: float             # step time / the epoch's median step time
    system: SystemSample | None    # the system sample nearest the middle of the step


@dataclass(frozen=True)
class EpochProfile:
    epoch: int
    steps: int
    p50_ms: float
    p99_ms: float
    data_wait_frac: float
    samples_per_s: float
    steps_per_s: float
    spikes: tuple[Spike, ...]
    n_spikes: int

    def metrics(self) -> dict[str, float]:
        return {"perf/step_p50_ms": self.p50_ms, "perf/step_p99_ms": self.p99_ms,
                "perf/data_wait_frac": self.data_wait_frac,
                "perf/step_samples_per_s": self.samples_per_s,
                "perf/steps_per_s": self.steps_per_s, "perf/step_spikes": float(self.n_spikes)}


def profile_steps(steps: Sequence[Step], spike_factor: float, max_spikes: int,
                  sampler: SystemSampler | None = None) -> EpochProfile | None:
    """Percentiles, data-wait fraction, throughput and spikes of one epoch's steps."""
    if not steps:
        return None
    seconds = np.array([s.seconds for s in steps])                    # (n,)
    total = float(seconds.sum())
    median = float(np.median(seconds))
    slow = [i for i in np.argsort(-seconds) if seconds[i] > spike_factor * median]
    spikes = tuple(Spike(steps[i], float(seconds[i] / median) if median > 0 else float("inf"),
                         sampler.nearest(steps[i].t + steps[i].seconds / 2)
                         if sampler is not None else None)
                   for i in slow[:max_spikes])
    return EpochProfile(
        epoch=steps[0].epoch, steps=len(steps),
        p50_ms=1e3 * median, p99_ms=1e3 * float(np.percentile(seconds, PERCENTILE_P99)),
        data_wait_frac=sum(s.wait for s in steps) / total if total > 0 else 0.0,
        samples_per_s=sum(s.size for s in steps) / total if total > 0 else 0.0,
        steps_per_s=len(steps) / total if total > 0 else 0.0, spikes=spikes, n_spikes=len(slow))


class StepProfiler:
    """Times the steps of a batch iterator it wraps (one epoch at a time)."""

    def __init__(self, clock: SystemSampler | None = None) -> None:
        self._start = time.perf_counter()
        self._clock = clock
        self.steps: list[Step] = []
        self.current: list[Step] = []

    def _now(self) -> float:
        return self._clock.now() if self._clock is not None else time.perf_counter() - self._start

    def wrap(self, epoch: int, batches: Iterable[Any]) -> Iterator[Any]:
        """Yield ``batches``; step i lasts from its request to the request of step i + 1."""
        self.current = []
        it = iter(batches)
        pending: tuple[float, float, int] | None = None     # (start, wait, size)
        try:
            while True:
                t0 = self._now()
                if pending is not None:
                    self._close(epoch, pending, t0)
                    pending = None
                batch = next(it, None)
                if batch is None:
                    return
                t1 = self._now()
                pending = (t0, t1 - t0, len(batch[0]))
                yield batch
        finally:
            if pending is not None:      # stopped early: the last step ends now
                self._close(epoch, pending, self._now())

    def _close(self, epoch: int, pending: tuple[float, float, int], end: float) -> None:
        start, wait, size = pending
        self.current.append(Step(epoch, len(self.current), start, end - start, wait, size))

    def finish_epoch(self, waits: Sequence[float] | None = None) -> list[Step]:
        """The epoch's steps; ``waits`` (a source's own per-batch waits) replace ours if aligned."""
        steps = self.current
        if waits is not None and len(waits) == len(steps):
            steps = [Step(s.epoch, s.index, s.t, s.seconds, min(w, s.seconds), s.size)
                     for s, w in zip(steps, waits, strict=True)]
        self.steps.extend(steps)
        self.current = []
        return steps


# -- the probe fit() calls -----------------------------------------------------------------------

@dataclass
class TrainMonitor:
    """System sampler + step profiler as ``fit``'s probe; a context manager."""

    cfg: MonitorConfig
    sampler: SystemSampler | None = None
    profiler: StepProfiler = field(init=False)
    epochs: list[EpochProfile] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sampler = self.sampler or SystemSampler(self.cfg.interval_s, gpu=self.cfg.gpu)
        self.profiler = StepProfiler(self.sampler)

    def __enter__(self) -> TrainMonitor:
        self.sampler.start()
        note = self.sampler.gpu_note
        log.info("monitor: sampling every %.2f s%s", self.cfg.interval_s,
                 f" (CPU only: {note})" if note else " (CPU + GPU)")
        return self

    def __exit__(self, *exc: object) -> None:
        self.sampler.stop()

    def batches(self, epoch: int, batches: Iterable[Any]) -> Iterator[Any]:
        return self.profiler.wrap(epoch, batches)

    def epoch_metrics(self, epoch: int, source: object) -> dict[str, float]:
        """Step-time profile and system summary of the epoch just trained."""
        steps = self.profiler.finish_epoch(getattr(source, "wait_times", None))
        profile = profile_steps(steps, self.cfg.spike_factor, self.cfg.max_spikes, self.sampler)
        if profile is None:
            return {}
        self.epochs.append(profile)
        log.info("epoch %d steps: p50 %.1f ms, p99 %.1f ms, data wait %.1f %%, %d spikes "
                 "(> %.1fx median)", epoch + 1, profile.p50_ms, profile.p99_ms,
                 100 * profile.data_wait_frac, profile.n_spikes, self.cfg.spike_factor)
        return {**profile.metrics(), **self._system(steps)}

    def _system(self, steps: Sequence[Step]) -> dict[str, float]:
        t0, t1 = steps[0].t, steps[-1].t + steps[-1].seconds
        window = [s for s in self.sampler.snapshot() if t0 <= s.t <= t1]
        if not window:
            return {}
        out = {"perf/cpu_percent_mean": float(np.mean([s.cpu_percent for s in window])),
               "perf/rss_mb_max": float(max(s.rss_mb for s in window))}
        gpus = [g for s in window for g in s.gpus]
        if gpus:
            out["perf/gpu_util_mean"] = float(np.mean([g.util_percent for g in gpus]))
            out["perf/gpu_mem_mb_max"] = float(max(g.mem_used_mb for g in gpus))
        return out

    def profile(self) -> dict[str, Any]:
        """Everything measured, as plain JSON types."""
        steps = _thin(self.profiler.steps, MAX_STEP_POINTS)
        return {
            "interval_s": self.cfg.interval_s, "spike_factor": self.cfg.spike_factor,
            "gpu": self.sampler.gpu_note or "sampled",
            "samples": [asdict(s) for s in self.sampler.snapshot()],
            "steps": {k: [getattr(s, k) for s in steps]
                      for k in ("epoch", "index", "t", "seconds", "wait", "size")},
            "epochs": [{**{k: v for k, v in asdict(e).items() if k != "spikes"},
                        "spikes": [_spike_dict(s) for s in e.spikes]} for e in self.epochs],
        }


def _spike_dict(spike: Spike) -> dict[str, Any]:
    return {**asdict(spike.step), "over_median": spike.over_median,
            "system": asdict(spike.system) if spike.system is not None else None}


def _thin(items: Sequence[Step], limit: int) -> Sequence[Step]:
    if len(items) <= limit:
        return items
    return [items[i] for i in np.linspace(0, len(items) - 1, limit).astype(int)]


# -- the profile artifact ------------------------------------------------------------------------

def write_profile(profile: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    """profile.json and profile.png in ``directory``; returns both paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, png_path = directory / PROFILE_JSON, directory / PROFILE_PNG
    json_path.write_text(json.dumps(profile, indent=1) + "\n")
    plot_profile(profile, png_path)
    return json_path, png_path


def plot_profile(profile: dict[str, Any], path: Path) -> None:
    """Utilisation, memory, and step / data-wait time against time (three panels)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (util, mem, steps) = plt.subplots(3, 1, sharex=True, figsize=FIGURE_SIZE)
    try:
        _plot_system(profile["samples"], util, mem)
        _plot_steps(profile, steps)
        steps.set_xlabel("seconds since start")
        fig.suptitle(f"train profile (GPU: {profile['gpu']})")
        fig.tight_layout()
        fig.savefig(path, dpi=FIGURE_DPI)
    finally:
        plt.close(fig)


def _plot_system(samples: list[dict[str, Any]], util: Any, mem: Any) -> None:
    t = [s["t"] for s in samples]
    util.plot(t, [s["cpu_percent"] for s in samples], label="CPU %")
    mem.plot(t, [s["rss_mb"] for s in samples], label="process RSS MiB")
    indices = sorted({g["index"] for s in samples for g in s["gpus"]})
    for index in indices:
        points = [(s["t"], g) for s in samples for g in s["gpus"] if g["index"] == index]
        util.plot([p[0] for p in points], [p[1]["util_percent"] for p in points],
                  label=f"GPU {index} util %")
        mem.plot([p[0] for p in points], [p[1]["mem_used_mb"] for p in points],
                 label=f"GPU {index} MiB")
    util.set_ylabel("utilisation %")
    mem.set_ylabel("memory MiB")
    for ax in (util, mem):
        ax.legend(loc="upper right", fontsize="small")


def _plot_steps(profile: dict[str, Any], ax: Any) -> None:
    steps = profile["steps"]
    t = np.asarray(steps["t"], dtype=float)
    ax.plot(t, 1e3 * np.asarray(steps["seconds"], dtype=float), ".", ms=2, label="step ms")
    ax.plot(t, 1e3 * np.asarray(steps["wait"], dtype=float), ".", ms=2, label="data wait ms")
    spikes = [s for e in profile["epochs"] for s in e["spikes"]]
    if spikes:
        ax.plot([s["t"] for s in spikes], [1e3 * s["seconds"] for s in spikes], "rx",
                label=f"spikes (> {profile['spike_factor']}x median)")
    ax.set_ylabel("ms")
    ax.legend(loc="upper right", fontsize="small")
