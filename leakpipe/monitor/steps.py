"""The step-time profile: every step timed, then summarised per epoch.

``StepProfiler`` times every step from the request of its batch to the request of the next one;
the data wait is the time inside the request (the sources' own ``wait_times`` when they have
them). ``profile_steps`` gives, per epoch, p50 / p99 step time, the data-wait fraction,
throughput and the spikes (steps over ``spike_factor`` x the median) with the system sample
nearest that moment.

On CUDA the loop does not synchronise per step, so a step time is the host-side time between
batch requests; kernel queues even it out, so p50 and throughput hold, single steps may not.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from leakpipe.monitor.system import SystemSample, SystemSampler

PERCENTILE_P50, PERCENTILE_P99 = 50, 99


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
        return {"vitals/step_p50_ms": self.p50_ms, "vitals/step_p99_ms": self.p99_ms,
                "vitals/data_wait_frac": self.data_wait_frac,
                "vitals/step_samples_per_s": self.samples_per_s,
                "vitals/steps_per_s": self.steps_per_s, "vitals/step_spikes": float(self.n_spikes)}


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
