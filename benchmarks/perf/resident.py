"""Measured memory of training data held the way training holds it (checks the preload plan).

``hold_training_split`` loads a split with the training loader itself
(``leakpipe.data.split_info.load_resident`` + ``ResidentSource``), starts an epoch and keeps two
batches in flight: the steady state of a training step. ``measure_growth`` wraps any such call
with host RSS (psutil) and, on CUDA, ``torch.cuda.memory_allocated`` samples, so the preload
estimate can be compared with reality: by ``bench_preload.py`` beside it (the figures of
docs/results/performance.md and docs/preload.md) and by tests/test_preload.py. Benchmark code,
not the package's: nothing the stages run needs it.

Figures: docs/preload.md, docs/results/performance.md.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psutil
import torch

from leakpipe.allocator import trim_heap
from leakpipe.data.feed import Batch
from leakpipe.data.resident_source import ResidentSource
from leakpipe.data.split_info import ResidentData, load_resident

T = TypeVar("T")
BATCHES_IN_FLIGHT = 2  # matches leakpipe.preload.estimate.BATCHES_IN_FLIGHT


@dataclass(frozen=True)
class MemorySample:
    rss: int             # bytes resident in host memory (psutil)
    cuda_allocated: int  # bytes allocated by torch on the CUDA device (0 on CPU)


@dataclass(frozen=True)
class Growth:
    """Memory growth across a call (bytes)."""

    host: int
    device: int

    @staticmethod
    def relative_error(measured: int, estimated: int) -> float:
        return abs(measured - estimated) / max(1, estimated)


@dataclass
class HeldSplit:
    """A split held as in a training step; drop the reference to free it."""

    data: ResidentData
    source: ResidentSource
    epoch: Iterator[Batch]  # keeps the epoch's order alive
    batches: list[Batch]


def sample_memory(device: torch.device | str = "cpu") -> MemorySample:
    """Host RSS and CUDA bytes allocated now, after collecting garbage."""
    gc.collect()
    trim_heap()
    device = torch.device(device)
    cuda = 0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        cuda = int(torch.cuda.memory_allocated(device))
    return MemorySample(int(psutil.Process().memory_info().rss), cuda)


def measure_growth(call: Callable[[], T], device: torch.device | str = "cpu") -> tuple[T, Growth]:
    """Run ``call`` and return its result with the memory it left allocated."""
    before = sample_memory(device)
    result = call()
    after = sample_memory(device)
    return result, Growth(after.rss - before.rss, after.cuda_allocated - before.cuda_allocated)


def hold_training_split(path: Path | str, placement: str, batch_size: int, *,
                        device: torch.device | str = "cpu", binary: bool = False,
                        seed: int = 0) -> HeldSplit:
    """Load ``path`` as training does and hold an epoch with two batches in flight."""
    data = load_resident(path, placement, device, binary)
    source = ResidentSource(data, batch_size, seed=seed)
    epoch = iter(source)
    batches = [batch for _, batch in zip(range(BATCHES_IN_FLIGHT), epoch, strict=False)]
    return HeldSplit(data, source, epoch, batches)
