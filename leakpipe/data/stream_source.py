"""Shuffled training batches read from HDF5 while training (placement ``stream``).

One background thread reads chunk-aligned blocks of whole files in a shuffled chunk order,
``buffer_chunks`` chunks (a window) at a time; segments are shuffled within the window and the
next window is read while this one is consumed.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import h5py
import numpy as np
import torch

from leakpipe.data.augment import TrainTransform
from leakpipe.data.background import BackgroundReader, read_file_block
from leakpipe.data.feed import (
    Batch,
    DeviceFeed,
    EpochState,
    HostBatch,
    cast_dtype,
    check_sharding,
    chunk_ranges,
    host_take,
    n_batches,
    oversampled_pool,
    seeded_generator,
    timed,
)
from leakpipe.data.split_info import read_split_info

DEFAULT_BUFFER_CHUNKS = 16    # HDF5 chunks per shuffle window of the stream source


@dataclass(frozen=True)
class Window:
    """Up to ``buffer_chunks`` chunks, read together and shuffled together."""

    key: int                        # first chunk id: seeds the in-window permutation
    rows: list[tuple[int, int]]     # chunk-aligned row ranges, in read order
    size: int                       # segments delivered, oversampling included


WindowData = tuple[HostBatch, torch.Tensor]   # (x, file_idx) of the window, its shuffled order


class StreamSource(EpochState):
    """Shuffled training batches read from HDF5 while training (splits larger than RAM).

    Memory: the window being consumed plus the one being read, 2 x ``buffer_chunks`` chunks.
    ``position`` counts batches; a resumed pass re-reads from the start of the window that
    holds its first segment and skips what was already delivered.
    """

    def __init__(self, path: Path | str, batch_size: int, *, seed: int, binary: bool,
                 device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
                 buffer_chunks: int = DEFAULT_BUFFER_CHUNKS, leak_oversample: int = 1,
                 rank: int = 0, world_size: int = 1, drop_last: bool = False,
                 transform: TrainTransform | None = None) -> None:
        super().__init__(batch_size, seed)
        check_sharding(leak_oversample, rank, world_size)
        if buffer_chunks < 1:
            raise ValueError(f"buffer_chunks must be >= 1, got {buffer_chunks}")
        self.info = read_split_info(path, binary)
        self.device = torch.device(device)
        self.dtype, self.buffer_chunks, self.leak_oversample = dtype, buffer_chunks, leak_oversample
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self.transform = transform      # normalisation / augmentation (None: batches as stored)
        self._chunks = chunk_ranges(self.info.n_files, self.info.chunk_rows)
        if len(self._chunks) < world_size:
            raise ValueError(f"{path}: {len(self._chunks)} chunks cannot be shared by "
                             f"{world_size} ranks")
        self._chunk_sizes = [self._segments_in(a, b) for a, b in self._chunks]
        self._labels = torch.from_numpy(self.info.file_labels).to(self.device)
        self._pin = self.device.type == "cuda"
        self._feed = DeviceFeed(self.device, overlap=self._pin)
        self._active: weakref.ref[Iterator[Batch]] | None = None

    def _segments_in(self, start: int, stop: int) -> int:
        leaks = int((self.info.file_labels[start:stop] == self.info.leak_label).sum())
        return (stop - start + (self.leak_oversample - 1) * leaks) * self.info.segments_per_file

    def windows(self, rank: int | None = None) -> list[Window]:
        """A rank's windows this epoch: the seeded chunk order dealt round robin, grouped."""
        rank = self.rank if rank is None else rank
        order = torch.randperm(len(self._chunks),
                               generator=seeded_generator(self.seed, self.current_epoch)).tolist()
        mine = order[rank::self.world_size]
        groups = [mine[i:i + self.buffer_chunks] for i in range(0, len(mine), self.buffer_chunks)]
        return [Window(g[0], [self._chunks[c] for c in g], sum(self._chunk_sizes[c] for c in g))
                for g in groups]

    def segments_per_rank(self) -> int:
        """Segments each rank delivers this epoch: the smallest rank's share (equal lengths)."""
        return min(sum(w.size for w in self.windows(r)) for r in range(self.world_size))

    def __len__(self) -> int:
        return n_batches(self.segments_per_rank(), self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[Batch]:
        batches = self._run(self._begin(), self.wait_times)
        self._active = weakref.ref(batches)
        return batches

    def _run(self, start: int, waits: list[float]) -> Iterator[Batch]:
        windows = self.windows()
        total = min(self.segments_per_rank(), len(self) * self.batch_size)  # drop_last cut
        first = start * self.batch_size
        if first >= total:
            return
        if self.transform is not None:
            self.transform.begin(self.current_epoch, start)
        starts = np.cumsum([0] + [w.size for w in windows]).tolist()
        w0 = bisect.bisect_right(starts, first) - 1
        with BackgroundReader(self.info.path) as reader:
            jobs = (self._window_job(w, self.current_epoch) for w in windows[w0:])
            loaded = reader.map(jobs, depth=1)
            host = self._host_batches(loaded, skip=first - starts[w0], limit=total - first)
            yield from timed(self._feed(host, self._finish), waits)

    def _window_job(self, window: Window, epoch: int) -> Callable[[h5py.Dataset], WindowData]:
        """Runs in the reader thread: read the window, shuffle its (oversampled) pool."""
        def job(mel: h5py.Dataset) -> WindowData:
            x, files = read_file_block(mel, window.rows, self.info)   # (n, 1, M, T), (n,)
            leak = torch.from_numpy(self.info.file_labels == self.info.leak_label)[files]
            pool = oversampled_pool(leak, self.leak_oversample)
            gen = seeded_generator(self.seed, epoch, window.key)
            return (x, files), pool[torch.randperm(len(pool), generator=gen)]
        return job

    def _host_batches(self, loaded: Iterator[WindowData], skip: int,
                      limit: int) -> Iterator[HostBatch]:
        """Consecutive batches of the concatenated window orders; a batch may span windows.

        ``limit`` segments are delivered, so every batch but the last is full.
        """
        batch: HostBatch | None = None
        have = 0
        for (x, files), order in loaded:
            order = order[skip:skip + limit]
            skip = 0
            pos = 0
            while pos < len(order):
                if batch is None:
                    batch = self._empty_batch(min(self.batch_size, limit), x.shape[1:], x.dtype)
                idx = order[pos:pos + len(batch[1]) - have]
                host_take(x, idx, batch[0][have:have + len(idx)])        # (n, 1, M, T)
                host_take(files, idx, batch[1][have:have + len(idx)])    # (n,)
                pos, have, limit = pos + len(idx), have + len(idx), limit - len(idx)
                if have == len(batch[1]):
                    yield batch
                    batch, have = None, 0
            del x, files, order   # free this window before the next one is requested
            if limit == 0:
                break

    def _empty_batch(self, n: int, shape: torch.Size, dtype: torch.dtype) -> HostBatch:
        x = torch.empty((n, *shape), dtype=dtype, pin_memory=self._pin)     # (n, 1, M, T)
        return x, torch.empty(n, dtype=torch.int64, pin_memory=self._pin)

    def _finish(self, x: torch.Tensor, file_idx: torch.Tensor) -> Batch:
        x, y = cast_dtype(x, self.dtype), self._labels.index_select(0, file_idx)
        if self.transform is not None:
            x = self.transform(x, y, file_idx)
        return x, y, file_idx

    def close(self) -> None:
        """Stop a pass still in progress: its reader thread is joined and its file closed."""
        active = self._active() if self._active is not None else None
        if active is not None:
            active.close()  # a generator: closing it runs the reader's shutdown
        self._active = None

    def __enter__(self) -> StreamSource:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
