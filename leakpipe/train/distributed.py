"""DistributedDataParallel for the train stage: `torchrun --nproc-per-node N stages/train.py`.

``from_env()`` reads torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and joins
the process group: nccl when the run uses CUDA, gloo on CPU. Without them (a plain
``python stages/train.py``) it returns ``Distributed.single()``, whose collectives are no-ops.

What the rest of training asks of it (docs/distributed.md):

* ``device(...)``: ``cuda`` becomes ``cuda:<LOCAL_RANK>``; ``rank`` / ``world_size`` shard the
  batch source (disjoint, equal-length shards, so every rank takes the same number of steps);
* ``wrap(model)``: the DDP module that averages gradients (the unwrapped module is saved);
* ``reduce_train(result)``: the epoch's training metrics summed over every rank's segments;
* ``broadcast(obj)``: rank 0 validates; its metrics reach every rank, so early stopping and
  best-epoch choice agree and no rank waits in a collective the others skipped;
* ``any(flag)``: a stop request seen by one rank stops all of them at the same step;
* ``gather(obj)``: each rank's mid-epoch progress, saved by rank 0 in one checkpoint;
* ``close()``: barrier, then ``destroy_process_group``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from leakpipe.train.loop import TrainEpochResult

log = logging.getLogger(__name__)

ENV_RANK, ENV_WORLD, ENV_LOCAL_RANK = "RANK", "WORLD_SIZE", "LOCAL_RANK"
ENV_LOCAL_WORLD = "LOCAL_WORLD_SIZE"
BACKEND_CPU, BACKEND_CUDA = "gloo", "nccl"
TIMEOUT = timedelta(minutes=30)   # rank 0 validates while the others wait in a broadcast
T = TypeVar("T")


@dataclass(frozen=True)
class Distributed:
    """This process's place in the job; with ``world_size`` 1 every method is a no-op."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    backend: str | None = None

    @classmethod
    def single(cls) -> Distributed:
        return cls()

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """``cuda`` -> this rank's GPU (``cuda:<LOCAL_RANK>``); other devices unchanged."""
        if device.type != "cuda" or not self.enabled:
            return device
        torch.cuda.set_device(self.local_rank)
        return torch.device("cuda", self.local_rank)

    def wrap(self, model: nn.Module) -> nn.Module:
        if not self.enabled:
            return model
        param = next(model.parameters())
        ids = [param.device.index] if param.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def _tensor(self, values: list[float]) -> torch.Tensor:
        device = torch.device("cuda", self.local_rank) if self.backend == BACKEND_CUDA else "cpu"
        return torch.tensor(values, dtype=torch.float64, device=device)

    def reduce_train(self, result: TrainEpochResult) -> TrainEpochResult:
        """Segment-weighted means over all ranks; time is the slowest rank's."""
        if not self.enabled:
            return result
        n = result.n_segments
        sums = self._tensor([result.loss * n, result.loss_class * n, result.loss_aux * n,
                             result.accuracy * n, float(n)])
        slowest = self._tensor([result.seconds])
        dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        loss, loss_class, loss_aux, correct, total = sums.tolist()
        total = max(total, 1.0)
        return dataclasses.replace(result, loss=loss / total, loss_class=loss_class / total,
                                   loss_aux=loss_aux / total, accuracy=correct / total,
                                   n_segments=int(total), seconds=float(slowest.item()))

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on at least one."""
        if not self.enabled:
            return flag
        value = self._tensor([float(flag)])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item() > 0)

    def gather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def close(self) -> None:
        """Wait for every rank, then leave the process group."""
        if self.enabled and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def launched_by_torchrun() -> bool:
    return int(os.environ.get(ENV_WORLD, "1")) > 1


def from_env(device: torch.device) -> Distributed:
    """Join the process group torchrun set up (nccl on CUDA, gloo on CPU); else single."""
    if not launched_by_torchrun():
        return Distributed.single()
    info = Distributed(rank=int(os.environ[ENV_RANK]), world_size=int(os.environ[ENV_WORLD]),
                       local_rank=int(os.environ.get(ENV_LOCAL_RANK, "0")),
                       local_world_size=int(os.environ.get(ENV_LOCAL_WORLD, "1")),
                       backend=BACKEND_CUDA if device.type == "cuda" else BACKEND_CPU)
    if info.backend == BACKEND_CUDA:
        torch.cuda.set_device(info.local_rank)
    if not dist.is_initialized():
        dist.init_process_group(info.backend, init_method="env://", timeout=TIMEOUT)
    log.info("distributed: rank %d of %d (local rank %d), backend %s", info.rank,
             info.world_size, info.local_rank, info.backend)
    return info
