"""Resident data on the GPU: the device placement, and pinned RAM with side-stream copies
giving the same batches while the default stream is busy.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from benchmarks.perf.gpu.common import (
    SEED,
    Setup,
    require,
    sync,
)


def check_placement_device(setup: Setup) -> dict[str, Any]:
    """load_resident on the GPU: training and file-order batches come from device memory."""
    from leakpipe.data.file_order import FileOrderBatches
    from leakpipe.data.resident_source import ResidentSource
    from leakpipe.data.split_info import load_resident

    data = load_resident(setup.train, "device", setup.device, binary=setup.cfg.binary)
    require(data.segments.device.type == "cuda", f"segments on {data.segments.device}")
    require(not data.overlap_copies, "device placement should need no copies")
    train = ResidentSource(data, setup.cfg.batch_size, seed=SEED)
    files = FileOrderBatches(data, setup.cfg.batch_size)
    rate_train, n_train = drain_rate(train, setup.device)
    rate_files, n_files = drain_rate(files, setup.device)
    return {"segments": int(data.segments.shape[0]), "segments_device": str(data.segments.device),
            "train_batches": n_train, "train_segments_per_s": rate_train,
            "file_order_batches": n_files, "file_order_segments_per_s": rate_files}


def check_placement_ram_pinned(setup: Setup) -> dict[str, Any]:
    """Pinned RAM + side-stream prefetch: the same batches as the device placement while the
    default stream is kept busy (a missing stream wait or record_stream shows as a mismatch)."""
    from leakpipe.data.file_order import FileOrderBatches
    from leakpipe.data.resident_source import ResidentSource
    from leakpipe.data.split_info import load_resident, read_split_info

    ram = load_resident(setup.train, "ram", setup.device, binary=setup.cfg.binary)
    dev = load_resident(setup.train, "device", setup.device, binary=setup.cfg.binary)
    source = ResidentSource(ram, setup.cfg.batch_size, seed=SEED)
    details = {"pinned": ram.segments.is_pinned(), "overlap_copies": ram.overlap_copies,
               "side_stream": getattr(source._feed, "stream", None) is not None}
    require(details["pinned"], "ram placement on CUDA is not pinned")
    require(details["overlap_copies"] and details["side_stream"], f"no side stream: {details}")
    train = compare_batches(source, ResidentSource(dev, setup.cfg.batch_size, seed=SEED),
                            setup.device)
    stream_info = read_split_info(setup.train, setup.cfg.binary)
    files = compare_batches(FileOrderBatches(ram, setup.cfg.batch_size),
                            FileOrderBatches(dev, setup.cfg.batch_size), setup.device)
    streamed = compare_batches(FileOrderBatches(stream_info, setup.cfg.batch_size,
                                                device=setup.device),
                               FileOrderBatches(dev, setup.cfg.batch_size), setup.device)
    details.update(train_batches=train, file_order_batches=files, stream_file_order=streamed)
    for name in ("train_batches", "file_order_batches", "stream_file_order"):
        require(details[name]["mismatches"] == 0, f"{name}: {details[name]}")
    rate, _ = drain_rate(source, setup.device)
    details["train_segments_per_s"] = rate
    details["mean_wait_ms"] = 1e3 * float(np.mean(source.wait_times)) if source.wait_times \
        else 0.0
    return details


def drain_rate(batches: Iterable[Any], device: torch.device) -> tuple[float, int]:
    """Segments per second of one pass over ``batches`` (nothing computed on them)."""
    sync(device)
    start, segments, n = time.perf_counter(), 0, 0
    for x, _, _ in batches:
        segments, n = segments + len(x), n + 1
    sync(device)
    return segments / max(time.perf_counter() - start, 1e-9), n


def compare_batches(got: Iterable[Any], want: Iterable[Any],
                    device: torch.device) -> dict[str, int]:
    """Batch-by-batch equality of two passes; the default stream busy while ``got`` copies."""
    a = torch.randn(1024, 1024, device=device)
    mismatches = n = 0
    for (x, y, f), (x2, y2, f2) in itertools.zip_longest(got, want, fillvalue=(None,) * 3):
        n += 1
        if x is None or x2 is None:
            mismatches += 1
            continue
        for _ in range(4):
            a = torch.tanh(a @ a)          # queued before this batch is read
        same = torch.equal(x, x2) and torch.equal(y, y2) and torch.equal(f, f2)
        mismatches += 0 if same else 1
    sync(device)
    return {"batches": n, "mismatches": mismatches}
