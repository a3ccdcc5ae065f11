"""``TrainMonitor``: the probe ``fit`` calls around each epoch's batches.

It starts the system sampler, wraps each epoch's batch iterator in the step profiler, and
reports the epoch's step-time profile plus a system summary as metrics; ``profile()`` is
everything measured, as plain JSON types, for the profile artifact.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from leakpipe.config import MonitorConfig
from leakpipe.monitor.steps import EpochProfile, Spike, Step, StepProfiler, profile_steps
from leakpipe.monitor.system import SystemSampler

log = logging.getLogger(__name__)

MAX_STEP_POINTS = 50_000           # per-step points kept in the profile (evenly thinned above)


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
        out = {"vitals/cpu_percent_mean": float(np.mean([s.cpu_percent for s in window])),
               "vitals/rss_mb_max": float(max(s.rss_mb for s in window))}
        gpus = [g for s in window for g in s.gpus]
        if gpus:
            out["vitals/gpu_util_mean"] = float(np.mean([g.util_percent for g in gpus]))
            out["vitals/gpu_mem_mb_max"] = float(max(g.mem_used_mb for g in gpus))
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
