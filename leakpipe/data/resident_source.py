"""Shuffled training batches from a split resident on the device or in RAM.

Every segment of the split lives in one contiguous tensor (``load_resident``); a batch is one
index operation (``host_take`` in RAM, ``index_select`` on the device) with a slice of a seeded
per-epoch permutation. On CUDA with ``ram`` the tensor is pinned and the next batch is copied
on a side stream while the current one computes.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from leakpipe.data.augment import TrainTransform
from leakpipe.data.feed import (
    Batch,
    DeviceFeed,
    EpochState,
    HostBatch,
    cast_dtype,
    check_sharding,
    host_take,
    n_batches,
    oversampled_pool,
    seeded_generator,
    shard,
    timed,
)
from leakpipe.data.split_info import ResidentData


class ResidentSource(EpochState):
    """Shuffled training batches from a split resident on the device or in RAM."""

    def __init__(self, data: ResidentData, batch_size: int, *, seed: int,
                 dtype: torch.dtype | None = None, leak_oversample: int = 1, rank: int = 0,
                 world_size: int = 1, drop_last: bool = False,
                 transform: TrainTransform | None = None) -> None:
        super().__init__(batch_size, seed)
        check_sharding(leak_oversample, rank, world_size)
        self.data = data
        self.info = data.info
        self.dtype = dtype
        self.transform = transform      # normalisation / augmentation (None: batches as stored)
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
        if self.transform is not None:
            self.transform.begin(self.current_epoch, start)
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
        x, y = cast_dtype(x, self.dtype), self.data.file_labels.index_select(0, file_idx)
        if self.transform is not None:
            x = self.transform(x, y, file_idx)
        return x, y, file_idx

    def close(self) -> None:
        """Nothing to release (the API matches ``StreamSource``)."""
