"""Stage `preload`: a measured memory plan instead of assuming the data fit (docs/preload.md).

``estimate`` says what training holds per split and placement (a pure function of the shapes),
``measure_budget`` what memory is free here, and ``choose_placement`` picks the placement
(``device``, ``ram`` or ``stream``) and the batch-size bound. ``read_shapes`` reads the split
shapes from the HDF5 files (metadata only) and ``plan_training`` ties them together for the
command.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from leakpipe.config import PreloadConfig
from leakpipe.constants import PLACEMENTS
from leakpipe.data.reader import open_split
from leakpipe.preload.budget import Budget, measure_budget
from leakpipe.preload.estimate import Footprint, SplitShape, estimate
from leakpipe.preload.plan import PLAN_FORMAT, TRAINING_SPLITS, Plan, choose_placement


def read_shapes(paths: Mapping[str, Path]) -> dict[str, SplitShape]:
    """The mel shape of each split file (checked by ``open_split``; no data is read)."""
    shapes = {}
    for split, path in paths.items():
        with open_split(path) as reader:
            shapes[split] = SplitShape(files=reader.n_files,
                                       segment_shape=tuple(reader.mel.shape[1:]),
                                       chunk_rows=reader.chunk_rows,
                                       stored_dtype=reader.mel.dtype.name)
    return shapes


def plan_training(shapes: Mapping[str, SplitShape], cfg: PreloadConfig,
                  budget: Budget | None = None, source: str = "<params>") -> tuple[Plan, Budget]:
    """Measure the budget (unless given) and decide the placement."""
    budget = budget or measure_budget()
    return choose_placement(shapes, budget, cfg, source), budget


__all__ = ["PLACEMENTS", "PLAN_FORMAT", "TRAINING_SPLITS", "Budget", "Footprint", "Plan",
           "SplitShape", "choose_placement", "estimate", "measure_budget", "plan_training",
           "read_shapes"]
