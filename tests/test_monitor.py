"""leakpipe.monitor: step timing, spikes with the system state, NVML present or absent, profile."""

from __future__ import annotations

import json
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakpipe.config import MonitorConfig
from leakpipe.monitor.artifact import profile_title, write_profile
from leakpipe.monitor.probe import TrainMonitor
from leakpipe.monitor.steps import Step, StepProfiler, profile_steps
from leakpipe.monitor.system import VISIBLE_DEVICES, GpuSample, Nvml, SystemSample, SystemSampler

CFG = MonitorConfig(enabled=True, interval_s=0.01, gpu=True, spike_factor=3.0, max_spikes=2,
                    mlflow_system_metrics=False, mlflow_interval_s=10.0)


class FakeClock:
    """A clock the test advances by hand (``now`` in seconds)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


def _batches(clock: FakeClock, waits: list[float], size: int = 4) -> Iterator[tuple]:
    for wait in waits:
        clock.t += wait                       # the source makes the consumer wait
        yield ([0] * size, None, None)


def test_profiler_splits_each_step_into_wait_and_compute() -> None:
    clock = FakeClock()
    profiler = StepProfiler(clock)  # type: ignore[arg-type]
    for _ in profiler.wrap(0, _batches(clock, [0.010, 0.001, 0.002])):
        clock.t += 0.020                      # the training step itself
    steps = profiler.finish_epoch()
    assert [round(s.wait, 6) for s in steps] == [0.010, 0.001, 0.002]
    assert [round(s.seconds, 6) for s in steps] == [0.030, 0.021, 0.022]
    assert [s.size for s in steps] == [4, 4, 4] and [s.index for s in steps] == [0, 1, 2]


def test_a_stopped_epoch_closes_its_last_step() -> None:
    clock = FakeClock()
    profiler = StepProfiler(clock)  # type: ignore[arg-type]
    wrapped = profiler.wrap(3, _batches(clock, [0.0] * 5))
    next(wrapped)
    clock.t += 0.5
    wrapped.close()                           # the loop stopped after one step (a signal)
    (step,) = profiler.finish_epoch()
    assert step.epoch == 3 and step.seconds == pytest.approx(0.5)


def test_source_wait_times_replace_measured_waits_when_aligned() -> None:
    clock = FakeClock()
    profiler = StepProfiler(clock)  # type: ignore[arg-type]
    for _ in profiler.wrap(0, _batches(clock, [0.01, 0.01])):
        clock.t += 0.01
    steps = profiler.finish_epoch(waits=[0.005, 0.007])
    assert [s.wait for s in steps] == [0.005, 0.007]


def _steps(seconds: list[float], wait: float = 0.0) -> list[Step]:
    t, out = 0.0, []
    for i, s in enumerate(seconds):
        out.append(Step(0, i, t, s, wait, 10))
        t += s
    return out


@pytest.mark.parametrize(("seconds", "factor", "spikes"), [
    ([0.01] * 10, 3.0, 0),
    ([0.01] * 9 + [0.05], 3.0, 1),
    ([0.01] * 9 + [0.025], 3.0, 0),
    ([0.01] * 8 + [0.05, 0.04], 3.0, 2),
    ([0.01] * 8 + [0.05, 0.04], 4.5, 1),
])
def test_spikes_are_steps_over_k_times_the_median(seconds: list[float], factor: float,
                                                  spikes: int) -> None:
    profile = profile_steps(_steps(seconds), factor, max_spikes=10)
    assert profile is not None and profile.n_spikes == spikes
    assert profile.p50_ms == pytest.approx(10.0)
    assert profile.steps_per_s == pytest.approx(len(seconds) / sum(seconds))
    assert [s.step.seconds for s in profile.spikes] == sorted(
        [s for s in seconds if s > factor * 0.01], reverse=True)


def test_profile_metrics_and_the_system_state_of_a_spike() -> None:
    sampler = SystemSampler(1.0, gpu=False)
    sampler.samples = [SystemSample(t, 10.0 * i, 50.0, 100.0) for i, t in enumerate([0, 1, 2])]
    steps = _steps([0.5, 0.5, 0.5, 0.9, 0.1], wait=0.05)          # spike from t = 1.5 to 2.4
    profile = profile_steps(steps, 1.5, max_spikes=5, sampler=sampler)
    (spike,) = profile.spikes
    assert spike.system == sampler.samples[2] and spike.over_median == pytest.approx(1.8)
    metrics = profile.metrics()
    assert metrics["vitals/data_wait_frac"] == pytest.approx(0.25 / 2.5)
    assert metrics["vitals/step_samples_per_s"] == pytest.approx(50 / 2.5)
    assert metrics["vitals/step_spikes"] == 1.0 and metrics["vitals/step_p50_ms"] == 500.0


def test_max_spikes_keeps_the_slowest() -> None:
    profile = profile_steps(_steps([0.01] * 10 + [0.1, 0.3, 0.2]), 3.0, max_spikes=2)
    assert profile.n_spikes == 3
    assert [s.step.seconds for s in profile.spikes] == [0.3, 0.2]


# -- NVML ---------------------------------------------------------------------------------------


class NVMLError(Exception):
    pass


def _fake_pynvml(*, fail_init: bool = False) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError

    def init() -> None:
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: 2
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 + h)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2**30, total=2**32)
    return nvml


def test_no_nvml_library_gives_a_cpu_only_profile(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)               # import raises ImportError
    sampler = SystemSampler(0.01)
    assert "not installed" in sampler.gpu_note
    assert sampler.sample().gpus == ()
    _run_monitor(sampler, tmp_path)


def test_no_driver_gives_a_cpu_only_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(fail_init=True))
    nvml = Nvml()
    assert not nvml.available and "Driver Not Loaded" in nvml.note and nvml.read() == ()


def test_visible_gpus_are_sampled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    monkeypatch.setenv(VISIBLE_DEVICES, "1")
    sampler = SystemSampler(0.01)
    assert sampler.gpu_note == ""
    assert sampler.sample().gpus == (GpuSample(1, 41.0, 1024.0, 4096.0),)
    profile = _run_monitor(sampler, tmp_path)
    assert profile["samples"] and profile["samples"][-1]["gpus"][0]["index"] == 1


def _run_monitor(sampler: SystemSampler, folder: Path) -> dict:
    """A monitored fake epoch, then the profile artifact; returns the profile JSON."""
    source = types.SimpleNamespace(wait_times=[])
    with TrainMonitor(CFG, sampler=sampler) as probe:
        batches = [([0] * 8, None, None) for _ in range(20)]
        for _batch in probe.batches(0, batches):
            source.wait_times.append(0.0)
            time.sleep(0.003)
        metrics = probe.epoch_metrics(0, source)
    assert {"vitals/step_p50_ms", "vitals/step_p99_ms", "vitals/data_wait_frac",
            "vitals/step_spikes"} <= set(metrics)
    json_path, png_path = write_profile(probe.profile(), folder)
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    profile = json.loads(json_path.read_text())
    assert len(profile["steps"]["seconds"]) == 20 and profile["epochs"][0]["steps"] == 20
    return profile


def _profile(device: str | None, gpus: tuple[int, ...], note: str) -> dict:
    sample = {"t": 0.0, "gpus": [{"index": i} for i in gpus]}
    return {"samples": [sample], "gpu": note, **({"device": device} if device else {})}


def test_the_profile_title_says_what_ran_where() -> None:
    missing = "NVML unavailable (NVML Shared Library Not Found)"
    assert profile_title(_profile("cpu", (), missing)) == "train profile: CPU run (no GPU)"
    assert profile_title(_profile("cuda", (0, 1), "sampled")) == (
        "train profile: CUDA run, GPU 0, 1 sampled")
    assert profile_title(_profile("cpu", (0,), "sampled")) == (   # a GPU there, CPU chosen
        "train profile: CPU run, GPU 0 sampled")
    assert profile_title(_profile("cuda", (), "nvidia-ml-py not installed")) == (
        "train profile: CUDA run, no GPU sampled (nvidia-ml-py not installed)")
    assert profile_title(_profile(None, (), missing)) == (        # a profile from before
        f"train profile: device not recorded, no GPU sampled ({missing})")
