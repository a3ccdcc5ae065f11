"""Training diagnostics: system / GPU sampling and the step-time profile (``monitor`` params).

Nothing here is woven through the training loop: ``TrainMonitor`` is handed to ``fit`` as its
probe, wraps each epoch's batch iterator and reports per-epoch metrics.

system.py    ``SystemSampler``: a daemon thread sampling host CPU / RAM, the process RSS and,
             per visible GPU, utilisation and memory (NVML; CPU-only without it, never a crash)
steps.py     ``StepProfiler`` and ``profile_steps``: per-step times and data waits; per epoch
             p50 / p99, data-wait fraction, throughput and the spikes with the system state
probe.py     ``TrainMonitor``: sampler + profiler as ``fit``'s probe; the profile as plain JSON
artifact.py  ``write_profile``: profile.json plus a profile.png plot (matplotlib, Agg)

The train stage's entry points are re-exported here; everything else is imported from the
module that defines it.
"""

from leakpipe.monitor.artifact import write_profile
from leakpipe.monitor.probe import TrainMonitor

__all__ = ["TrainMonitor", "write_profile"]
