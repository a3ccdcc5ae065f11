"""A training source cut to a share of each epoch's batches (tuning trials, cross-validation).

Each epoch takes the first ``fraction`` of that epoch's shuffled batches, so every epoch sees a
new random subset and a fixed budget buys several passes of the schedule instead of one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from leakpipe.train.fit_types import TrainSource
from leakpipe.train.loop import Batch


class Subsample:
    """The first ``fraction`` of each epoch's shuffled batches: a new random subset per epoch."""

    def __init__(self, source: TrainSource, fraction: float) -> None:
        self.source = source
        self.n_batches = max(1, math.ceil(len(source) * fraction))

    def __len__(self) -> int:
        return self.n_batches

    def epoch(self, epoch: int) -> Iterator[Batch]:
        batches = iter(self.source.epoch(epoch))
        try:
            yield from itertools.islice(batches, self.n_batches)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # a stream source stops its read-ahead
