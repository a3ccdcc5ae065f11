"""Batch sources for training and evaluation: one index operation per batch, no worker processes.

The original trainer starved its GPU: a DataLoader with up to 20 workers read one segment per
``__getitem__`` from HDF5 and collated them (ORIGIN.md, fault 1). Here a batch is never built
sample by sample:

* ``ResidentSource`` (placements ``device`` and ``ram``): every segment of a split lives in one
  contiguous tensor (N, 1, n_mels, n_frames); a batch is one index operation (``host_take`` in
  RAM, ``index_select`` on the device) with a slice of a seeded per-epoch permutation. On CUDA
  with ``ram`` the tensor is pinned and the next batch is copied on a side stream while the
  current one computes.
* ``StreamSource`` (placement ``stream``): one background thread reads chunk-aligned blocks of
  whole files in a shuffled chunk order, ``buffer_chunks`` chunks (a window) at a time; segments
  are shuffled within the window and the next window is read while this one is consumed.
* ``FileOrderBatches``: every segment exactly once, in file order, batches of whole files
  (validation and evaluation vote per file).

All yield ``(x, y, file_idx)``: x (B, 1, n_mels, n_frames) on the target device, y (B,) int64
task labels (a segment inherits its file's label), file_idx (B,) int64 row of the file in the
split. Segment s belongs to file s // (n_long * n_short). Each source records in
``wait_times`` the seconds the consumer waited for each batch of the current pass.
"""

from __future__ import annotations

import bisect
import logging
import math
import mmap
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import h5py
import numpy as np
import torch

from leakpipe.constants import H5_MEL
from leakpipe.data.reader import open_split
from leakpipe.data.schema import DataFormatError, leak_index, task_classes, task_labels

log = logging.getLogger(__name__)

PLACEMENT_DEVICE = "device"   # the whole split in accelerator memory
PLACEMENT_RAM = "ram"         # the whole split in (pinned on CUDA) host memory
PLACEMENT_STREAM = "stream"   # read from HDF5 while training
PLACEMENTS: tuple[str, ...] = (PLACEMENT_DEVICE, PLACEMENT_RAM, PLACEMENT_STREAM)
DEFAULT_BUFFER_CHUNKS = 16    # HDF5 chunks per shuffle window of the stream source
EVAL_READ_AHEAD = 2           # file-order reads queued ahead by the stream eval reader
EVAL_READ_BYTES = 8 * 2**20   # bytes per stream eval read (whole batches): few, large reads
SEED_MASK = 2**63 - 1         # torch.Generator.manual_seed takes a 64-bit signed seed
_TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32}

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]   # x, y, file_idx
HostBatch = tuple[torch.Tensor, torch.Tensor]              # x, segment or file index
T = TypeVar("T")


# -- split metadata and resident loading --------------------------------------------------------

@dataclass(frozen=True)
class SplitInfo:
    """What a batch source needs to know about a split, read once without the mel data."""

    path: Path
    file_labels: np.ndarray        # (files,) int64 task labels
    classes: tuple[str, ...]       # task class names (binary or the split's classes)
    leak_label: int                # task-space index of the leak class
    segment_shape: tuple[int, ...]  # (n_long, n_short, n_mels, n_frames)
    chunk_rows: int
    dtype: torch.dtype             # storage dtype of `mel`

    @property
    def n_files(self) -> int:
        return len(self.file_labels)

    @property
    def segments_per_file(self) -> int:
        return self.segment_shape[0] * self.segment_shape[1]

    @property
    def n_segments(self) -> int:
        return self.n_files * self.segments_per_file

    @property
    def mel_shape(self) -> tuple[int, int]:
        return self.segment_shape[2], self.segment_shape[3]

    @property
    def file_bytes(self) -> int:
        return math.prod(self.segment_shape) * self.dtype.itemsize


def read_split_info(path: Path | str, binary: bool) -> SplitInfo:
    """Labels (in task space), classes and shapes of a split; the mel data is not read."""
    with open_split(path) as split:
        classes = task_classes(split.class_names, binary)
        leak = leak_index(classes) if binary else split.leak_index
        dtype = _TORCH_DTYPES.get(split.mel.dtype.name)
        if dtype is None:
            raise DataFormatError(f"{path}: dataset 'mel' has dtype {split.mel.dtype}, "
                                  f"expected one of {sorted(_TORCH_DTYPES)}")
        return SplitInfo(Path(path), task_labels(split.labels, split.class_names, binary),
                         classes, leak, tuple(split.mel.shape[1:]), split.chunk_rows, dtype)


@dataclass(frozen=True)
class ResidentData:
    """A whole split as one tensor of segments, plus its file labels on the target device."""

    info: SplitInfo
    segments: torch.Tensor      # (N, 1, n_mels, n_frames), N = files * segments_per_file
    file_labels: torch.Tensor   # (files,) int64, on `device`
    device: torch.device        # where batches are delivered

    @property
    def overlap_copies(self) -> bool:
        """Host-resident data feeding a CUDA device: pinned, copied on a side stream."""
        return self.device.type == "cuda" and self.segments.device.type == "cpu"


def load_resident(path: Path | str, placement: str, device: torch.device | str,
                  binary: bool) -> ResidentData:
    """Read a split into one contiguous tensor on the device (``device``) or in RAM (``ram``)."""
    _check_placement(placement, (PLACEMENT_DEVICE, PLACEMENT_RAM))
    info = read_split_info(path, binary)
    device = torch.device(device)
    store = device if placement == PLACEMENT_DEVICE else torch.device("cpu")
    pin = store.type == "cpu" and device.type == "cuda"
    segments = torch.empty((info.n_segments, 1, *info.mel_shape), dtype=info.dtype,
                           device=store, pin_memory=pin)  # (N, 1, n_mels, n_frames)
    spf = info.segments_per_file
    with open_split(path) as split:
        for start, block in split.iter_chunks():  # block (k, n_long, n_short, M, T)
            seg = torch.from_numpy(split.as_segments(block)).unsqueeze(1)  # (k * spf, 1, M, T)
            segments[start * spf:start * spf + len(seg)].copy_(seg)
    log.info("loaded %s: %d segments, %.1f MiB on %s%s", path, info.n_segments,
             segments.numel() * segments.element_size() / 2**20, store,
             " (pinned)" if pin else "")
    labels = torch.from_numpy(info.file_labels).to(device)
    return ResidentData(info, segments, labels, device)


def _check_placement(placement: str, allowed: tuple[str, ...]) -> None:
    if placement not in allowed:
        raise ValueError(f"placement {placement!r} is not one of {list(allowed)}")


# -- shared pieces: seeds, orders, device copies, timing -----------------------------------------

def seeded_generator(seed: int, *keys: int) -> torch.Generator:
    """A CPU generator whose stream depends on (seed, *keys): same keys, same permutation."""
    mixed = np.random.SeedSequence([seed, *keys]).generate_state(1, dtype=np.uint64)[0]
    gen = torch.Generator()
    gen.manual_seed(int(mixed) & SEED_MASK)
    return gen


def oversampled_pool(leak_mask: torch.Tensor, factor: int) -> torch.Tensor:
    """Indices 0..n-1 once each, plus the leak ones ``factor - 1`` more times (unshuffled)."""
    base = torch.arange(len(leak_mask))               # (n,)
    if factor == 1:
        return base
    return torch.cat([base, base[leak_mask].repeat(factor - 1)])


def shard(order: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's disjoint, equal-length share of ``order`` (the remainder is dropped)."""
    per_rank = len(order) // world_size
    return order[rank:per_rank * world_size:world_size]


def n_batches(n_items: int, batch_size: int, drop_last: bool) -> int:
    return n_items // batch_size if drop_last else -(-n_items // batch_size)


Finish = Callable[[torch.Tensor, torch.Tensor], Batch]


class DeviceFeed:
    """Moves host batches to the target device; on CUDA one batch ahead on a side stream.

    ``finish(x, index)`` turns a batch already on the device into ``(x, y, file_idx)``. Without
    overlap (CPU, or data already on the device) it runs inline; with overlap the copy and
    ``finish`` of batch k + 1 are queued on the side stream before batch k is handed out.
    """

    def __init__(self, device: torch.device, overlap: bool) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device) if overlap and device.type == "cuda" else None

    def __call__(self, host: Iterable[HostBatch], finish: Finish) -> Iterator[Batch]:
        if self.stream is None:
            for x, index in host:
                yield finish(x.to(self.device), index.to(self.device))
            return
        batches = iter(host)
        pending = self._launch(next(batches, None), finish)
        while pending is not None:
            ready = self._ready(pending)   # before the next launch: wait for this copy only
            pending = self._launch(next(batches, None), finish)
            yield ready

    def _launch(self, batch: HostBatch | None, finish: Finish) -> Batch | None:
        if batch is None:
            return None
        with torch.cuda.stream(self.stream):
            x, index = (t.to(self.device, non_blocking=True) for t in batch)
            return finish(x, index)

    def _ready(self, batch: Batch) -> Batch:
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        for tensor in batch:
            tensor.record_stream(current)  # freed tensors must not be reused by the side stream
        return batch


def timed(batches: Iterator[Batch], waits: list[float]) -> Iterator[Batch]:
    """Pass batches through, appending the seconds the consumer waited for each to ``waits``."""
    while True:
        t0 = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            return
        waits.append(time.perf_counter() - t0)
        yield batch


class _EpochState:
    """Shared by the training sources: epoch, resume position and consumer wait times."""

    def __init__(self, batch_size: int, seed: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.seed = seed
        self.current_epoch = 0
        self.wait_times: list[float] = []   # seconds waited per batch of the current pass
        self._start = 0                     # first batch of the current pass
        self._resume = 0                    # where the next pass starts (load_state_dict)

    @property
    def position(self) -> int:
        """Batches of the current epoch handed out so far (resumed ones included)."""
        return self._start + len(self.wait_times)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's order; a resume position loaded for this epoch is kept."""
        if epoch != self.current_epoch:
            self._resume = 0
        self.current_epoch = epoch

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """``set_epoch(epoch)`` then a pass: the batches of that epoch (from a resume point)."""
        self.set_epoch(epoch)
        return iter(self)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.current_epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next pass continues epoch ``state['epoch']`` after ``state['position']`` batches."""
        self.current_epoch = int(state["epoch"])
        self._start = self._resume = int(state["position"])
        self.wait_times = []

    def _begin(self) -> int:
        """Start a pass: at the loaded resume position once, else at batch 0."""
        self._start, self._resume = self._resume, 0
        self.wait_times = []
        return self._start


def host_take(src: torch.Tensor, idx: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out[:] = src[idx]`` along dim 0 for CPU tensors: the one index operation of a batch.

    numpy's take is single-threaded. torch's CPU index_select fans a ~100 KB gather out to the
    OpenMP pool, and on a busy machine one descheduled thread stalls it: on 2 shared cores the
    mean gather took 2.3 ms with torch vs 0.1 ms with numpy (p50 19 vs 29 us when idle).
    """
    # indices are in range by construction; mode="clip" lets numpy write `out` unbuffered
    np.take(src.numpy(), idx.numpy(), axis=0, out=out.numpy(), mode="clip")
    return out


def _cast(x: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return x if dtype is None or x.dtype == dtype else x.to(dtype)


# -- resident ----------------------------------------------------------------------------------

class ResidentSource(_EpochState):
    """Shuffled training batches from a split resident on the device or in RAM."""

    def __init__(self, data: ResidentData, batch_size: int, *, seed: int,
                 dtype: torch.dtype | None = None, leak_oversample: int = 1, rank: int = 0,
                 world_size: int = 1, drop_last: bool = False) -> None:
        super().__init__(batch_size, seed)
        _check_sharding(leak_oversample, rank, world_size)
        self.data = data
        self.info = data.info
        self.dtype = dtype
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        spf = data.info.segments_per_file
        leak_files = torch.from_numpy(data.info.file_labels == data.info.leak_label)
        self._pool = oversampled_pool(leak_files.repeat_interleave(spf), leak_oversample)
        self._per_rank = len(self._pool) // world_size
        if self._per_rank == 0:
            raise ValueError(f"{data.info.path}: {len(self._pool)} segments cannot be shared "
                             f"by {world_size} ranks")
        self._feed = DeviceFeed(data.device, data.overlap_copies)

    def __len__(self) -> int:
        return n_batches(self._per_rank, self.batch_size, self.drop_last)

    def order(self) -> torch.Tensor:
        """This rank's segment ids for the current epoch, (segments per rank,) int64 on CPU."""
        gen = seeded_generator(self.seed, self.current_epoch)
        perm = torch.randperm(len(self._pool), generator=gen)
        return shard(self._pool[perm], self.rank, self.world_size)

    def __iter__(self) -> Iterator[Batch]:
        start = self._begin()
        order = self.order()
        if self.data.overlap_copies:
            order = order.pin_memory()                        # async copies of the indices
        order = order.to(self.data.segments.device)
        return timed(self._feed(self._host_batches(order, start), self._finish),
                     self.wait_times)

    def _host_batches(self, order: torch.Tensor, start: int) -> Iterator[HostBatch]:
        b = self.batch_size
        for i in range(start, len(self)):
            idx = order[i * b:(i + 1) * b]                   # (B,) segment ids
            yield self._gather(idx), idx

    def _gather(self, idx: torch.Tensor) -> torch.Tensor:
        """The one index operation of a batch: (N, 1, M, T) -> (B, 1, M, T)."""
        segments = self.data.segments
        if segments.device.type != "cpu":
            return segments.index_select(0, idx)
        out = torch.empty((len(idx), *segments.shape[1:]), dtype=segments.dtype,
                          pin_memory=self.data.overlap_copies)
        return host_take(segments, idx, out)

    def _finish(self, x: torch.Tensor, idx: torch.Tensor) -> Batch:
        file_idx = torch.div(idx, self.info.segments_per_file, rounding_mode="floor")  # (B,)
        return _cast(x, self.dtype), self.data.file_labels.index_select(0, file_idx), file_idx

    def close(self) -> None:
        """Nothing to release (the API matches ``StreamSource``)."""


def _check_sharding(leak_oversample: int, rank: int, world_size: int) -> None:
    if leak_oversample < 1:
        raise ValueError(f"leak_oversample must be an integer >= 1, got {leak_oversample}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..world_size-1 (world_size {world_size})")


# -- the background reader -----------------------------------------------------------------------

def _read_rows(mel: h5py.Dataset, start: int, stop: int, out: np.ndarray) -> None:
    """Read files ``start:stop`` of ``mel`` into ``out`` (one call per chunk-aligned block)."""
    mel.read_direct(out, np.s_[start:stop])


class BackgroundReader:
    """One thread with its own HDF5 handle and at most ``depth`` reads in flight (bounded).

    A job is a function of the ``mel`` dataset. ``map`` hands results over in submission order
    and re-raises a job's exception in the consumer; ``close`` cancels what has not started,
    closes the file in the thread that opened it and joins the thread. h5py holds the GIL
    while it reads, so jobs read one chunk-aligned block per call to let the consumer run.
    """

    def __init__(self, path: Path, name: str = "leakpipe-reader") -> None:
        self.path = path
        self._h5: h5py.File | None = None   # opened, used and closed by the reader thread only
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: deque[Future[Any]] = deque()
        self._closed = False

    def _run(self, job: Callable[[h5py.Dataset], T]) -> T:
        if self._h5 is None:
            self._h5 = h5py.File(self.path, "r")
        return job(self._h5[H5_MEL])

    def _close_file(self) -> None:
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None

    def map(self, jobs: Iterable[Callable[[h5py.Dataset], T]], depth: int) -> Iterator[T]:
        jobs = iter(jobs)
        for job in jobs:
            self._pending.append(self._pool.submit(self._run, job))
            if len(self._pending) >= depth:
                break
        while self._pending:
            result = self._pending.popleft().result()   # a reader error is raised here
            job = next(jobs, None)
            if job is not None:
                self._pending.append(self._pool.submit(self._run, job))
            yield result

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while self._pending:
            self._pending.popleft().cancel()
        self._pool.submit(self._close_file)
        self._pool.shutdown(wait=True)

    def __enter__(self) -> BackgroundReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _unmapped_on_free(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array in its own anonymous mapping, returned to the OS as soon as it is freed.

    Windows come and go every few hundred batches from a new reader thread each pass; from
    malloc, glibc's per-thread arenas and growing mmap threshold keep the freed windows
    resident (measured: RSS grew by about two windows per epoch).
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=dtype,
                         count=int(np.prod(shape))).reshape(shape)


def read_file_block(mel: h5py.Dataset, rows: list[tuple[int, int]], info: SplitInfo,
                    pin: bool = False) -> HostBatch:
    """Read row ranges of files -> x (n, 1, M, T) segments in row order, file_idx (n,)."""
    n_rows = sum(stop - start for start, stop in rows)
    block = _unmapped_on_free((n_rows, *info.segment_shape), mel.dtype)  # (k, L, S, M, T)
    offset = 0
    for start, stop in rows:
        _read_rows(mel, start, stop, block[offset:offset + stop - start])
        offset += stop - start
    x = torch.from_numpy(block).view(n_rows * info.segments_per_file, 1, *info.mel_shape)
    files = torch.cat([torch.arange(start, stop) for start, stop in rows])
    files = files.repeat_interleave(info.segments_per_file)  # (n,)
    return (x.pin_memory(), files.pin_memory()) if pin else (x, files)


# -- stream ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """Up to ``buffer_chunks`` chunks, read together and shuffled together."""

    key: int                        # first chunk id: seeds the in-window permutation
    rows: list[tuple[int, int]]     # chunk-aligned row ranges, in read order
    size: int                       # segments delivered, oversampling included


WindowData = tuple[HostBatch, torch.Tensor]   # (x, file_idx) of the window, its shuffled order


class StreamSource(_EpochState):
    """Shuffled training batches read from HDF5 while training (splits larger than RAM).

    Memory: the window being consumed plus the one being read, 2 x ``buffer_chunks`` chunks.
    ``position`` counts batches; a resumed pass re-reads from the start of the window that
    holds its first segment and skips what was already delivered.
    """

    def __init__(self, path: Path | str, batch_size: int, *, seed: int, binary: bool,
                 device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
                 buffer_chunks: int = DEFAULT_BUFFER_CHUNKS, leak_oversample: int = 1,
                 rank: int = 0, world_size: int = 1, drop_last: bool = False) -> None:
        super().__init__(batch_size, seed)
        _check_sharding(leak_oversample, rank, world_size)
        if buffer_chunks < 1:
            raise ValueError(f"buffer_chunks must be >= 1, got {buffer_chunks}")
        self.info = read_split_info(path, binary)
        self.device = torch.device(device)
        self.dtype, self.buffer_chunks, self.leak_oversample = dtype, buffer_chunks, leak_oversample
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self._chunks = _chunk_ranges(self.info.n_files, self.info.chunk_rows)
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
        return _cast(x, self.dtype), self._labels.index_select(0, file_idx), file_idx

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


def _chunk_ranges(n_files: int, chunk_rows: int) -> list[tuple[int, int]]:
    return [(a, min(a + chunk_rows, n_files)) for a in range(0, n_files, chunk_rows)]


# -- evaluation order ----------------------------------------------------------------------------

class FileOrderBatches:
    """Every segment exactly once, in file order; each batch holds whole files.

    A batch holds ``max(1, max_segments // segments_per_file)`` files (a file larger than the
    budget is still one batch: files are never split, so votes stay per file). Built from
    ``ResidentData`` it slices the resident tensor; from a ``SplitInfo`` it streams the file
    with one background reader.
    """

    def __init__(self, source: ResidentData | SplitInfo, max_segments: int, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype | None = None) -> None:
        if max_segments < 1:
            raise ValueError(f"max_segments must be >= 1, got {max_segments}")
        self.resident = source if isinstance(source, ResidentData) else None
        self.info = source.info if isinstance(source, ResidentData) else source
        self.device = source.device if isinstance(source, ResidentData) else torch.device(device)
        self.dtype = dtype
        self.files_per_batch = max(1, max_segments // self.info.segments_per_file)
        self._labels = torch.from_numpy(self.info.file_labels).to(self.device)
        self._pin = (self.resident.overlap_copies if self.resident is not None
                     else self.device.type == "cuda")
        self._feed = DeviceFeed(self.device, self._pin)
        self.wait_times: list[float] = []

    def ranges(self) -> list[tuple[int, int]]:
        """(first file, end file) of each batch, in file order."""
        return _chunk_ranges(self.info.n_files, self.files_per_batch)

    def __len__(self) -> int:
        return len(self.ranges())

    def __iter__(self) -> Iterator[Batch]:
        self.wait_times = []
        if self.resident is not None:
            yield from timed(self._feed(self._resident_batches(), self._finish), self.wait_times)
            return
        with BackgroundReader(self.info.path, "leakpipe-eval-reader") as reader:
            jobs = (self._block_job(r) for r in self.read_ranges())
            host = self._split(reader.map(jobs, depth=EVAL_READ_AHEAD))
            yield from timed(self._feed(host, self._finish), self.wait_times)

    def read_ranges(self) -> list[tuple[int, int]]:
        """File ranges read at once when streaming: whole batches, about EVAL_READ_BYTES.

        Small forward passes (CPU) would otherwise mean many small HDF5 reads, each paying the
        per-call cost on the cores the forward pass needs.
        """
        batch_bytes = self.files_per_batch * self.info.file_bytes
        per_read = self.files_per_batch * max(1, EVAL_READ_BYTES // max(1, batch_bytes))
        return _chunk_ranges(self.info.n_files, per_read)

    def _split(self, blocks: Iterable[HostBatch]) -> Iterator[HostBatch]:
        """Cut read blocks into the batches of ``ranges()`` (views, no copies)."""
        step = self.files_per_batch * self.info.segments_per_file
        for x, files in blocks:
            for a in range(0, len(x), step):
                yield x[a:a + step], files[a:a + step]

    def _block_job(self, rows: tuple[int, int]) -> Callable[[h5py.Dataset], HostBatch]:
        return lambda mel: read_file_block(mel, [rows], self.info, self._pin)

    def _resident_batches(self) -> Iterator[HostBatch]:
        segments, spf = self.resident.segments, self.info.segments_per_file
        for a, b in self.ranges():
            where = "cpu" if self._pin else segments.device
            files = torch.arange(a, b, device=where).repeat_interleave(spf)   # (n,)
            files = files.pin_memory() if self._pin else files
            yield segments[a * spf:b * spf], files                      # a view, (n, 1, M, T)

    def _finish(self, x: torch.Tensor, file_idx: torch.Tensor) -> Batch:
        return _cast(x, self.dtype), self._labels.index_select(0, file_idx), file_idx


# -- factories -----------------------------------------------------------------------------------

TrainSource = ResidentSource | StreamSource


def make_train_source(path: Path | str, placement: str, batch_size: int, *, seed: int,
                      binary: bool, device: torch.device | str = "cpu",
                      dtype: torch.dtype | None = None, leak_oversample: int = 1,
                      rank: int = 0, world_size: int = 1, drop_last: bool = False,
                      buffer_chunks: int = DEFAULT_BUFFER_CHUNKS) -> TrainSource:
    """The training source for a placement chosen by the preload stage."""
    _check_placement(placement, PLACEMENTS)
    if placement == PLACEMENT_STREAM:
        return StreamSource(path, batch_size, seed=seed, binary=binary, device=device,
                            dtype=dtype, buffer_chunks=buffer_chunks,
                            leak_oversample=leak_oversample, rank=rank, world_size=world_size,
                            drop_last=drop_last)
    return ResidentSource(load_resident(path, placement, device, binary), batch_size, seed=seed,
                          dtype=dtype, leak_oversample=leak_oversample, rank=rank,
                          world_size=world_size, drop_last=drop_last)


def make_eval_batches(path: Path | str, placement: str, max_segments: int, *, binary: bool,
                      device: torch.device | str = "cpu",
                      dtype: torch.dtype | None = None) -> FileOrderBatches:
    """File-order batches of a split for validation / evaluation, for a placement."""
    _check_placement(placement, PLACEMENTS)
    if placement == PLACEMENT_STREAM:
        source: ResidentData | SplitInfo = read_split_info(path, binary)
    else:
        source = load_resident(path, placement, device, binary)
    return FileOrderBatches(source, max_segments, device=device, dtype=dtype)
