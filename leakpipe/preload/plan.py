"""The placement decision: where training keeps its data, and how large a batch may be.

Training holds the train split (shuffled batches) and the val split (file-order evaluation)
at the same time, so a placement fits when both fit together. ``auto`` takes the first of
``device``, ``ram``, ``stream`` that fits with batches of ``max_batch_size``; if none does, the
first that fits with a smaller batch, and says so. A forced mode that cannot fit at all is a
``ConfigError`` naming ``preload.mode``. Everything here is pure: the budget is an argument.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakpipe.config import PreloadConfig
from leakpipe.constants import PLACEMENT_DEVICE, PLACEMENT_RAM, PLACEMENT_STREAM, PLACEMENTS
from leakpipe.errors import ConfigError, DataError
from leakpipe.preload.budget import Budget
from leakpipe.preload.estimate import (
    ROLE_EVAL,
    ROLE_TRAIN,
    Footprint,
    SplitShape,
    estimate,
    itemsize,
)

PLAN_FORMAT = "leakpipe.preload/1"
TRAIN_SPLIT = "train"
TRAINING_SPLITS = ("train", "val")  # held together while training
GIB = 2**30
MIB = 2**20
MEASURED_KEYS = ("batch_bound", "why")   # of a Candidate: they quote the free memory
LABELS_NOTE = ("int64 labels per file (file_labels); a segment's file is segment // "
               "segments_per_file, so no per-segment labels are allocated")


@dataclass(frozen=True)
class Candidate:
    """One placement tried: does it fit, its footprint, its batch-size bound, and why."""

    placement: str
    fits: bool
    fits_max_batch: bool
    host_bytes: int
    device_bytes: int
    batch_bound: int
    why: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Plan:
    """The decision written to reports/preload.json."""

    placement: str
    device: str
    pin_memory: bool
    dtype: str
    batch_size_max: int
    buffer_chunks: int
    reason: str
    candidates: tuple[Candidate, ...]
    estimates: dict[str, dict[str, Any]] = field(default_factory=dict)
    allocations: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self, cfg: PreloadConfig, shapes: Mapping[str, SplitShape]) -> dict[str, Any]:
        """The decision (reports/preload.json, which train and tune depend on): nothing measured,
        so the same data and params on a machine with room to spare give the same bytes and a
        re-run of `preload` leaves training up to date."""
        return {
            "format": PLAN_FORMAT,
            "placement": self.placement, "device": self.device, "pin_memory": self.pin_memory,
            "dtype": self.dtype,
            "stored_dtype": {s: shape.stored_dtype for s, shape in shapes.items()},
            "batch_size": {"min": 1, "max": self.batch_size_max},
            "stream": {"buffer_chunks": self.buffer_chunks,
                       "chunk_rows": {s: shape.chunk_rows for s, shape in shapes.items()}},
            "training_splits": [s for s in TRAINING_SPLITS if s in shapes],
            "labels": LABELS_NOTE,
            "allocations": self.allocations,
            "candidates": [{k: v for k, v in c.to_dict().items() if k not in MEASURED_KEYS}
                           for c in self.candidates],
            "estimates": self.estimates,
            "params": dataclasses.asdict(cfg),
        }

    def measurement(self, budget: Budget, cfg: PreloadConfig) -> dict[str, Any]:
        """What was measured and why the decision fell as it did (free memory changes from run
        to run: logged and written beside the plan, never part of it)."""
        return {
            "format": PLAN_FORMAT,
            "reason": self.reason,
            "candidates": [{k: v for k, v in c.to_dict().items()
                            if k in ("placement", *MEASURED_KEYS)} for c in self.candidates],
            "budget": {**budget.to_dict(),
                       "host_usable": budget.host_usable(cfg.safety, cfg.host_reserve_mb),
                       "device_usable": budget.device_usable(cfg.safety, cfg.device_reserve_mb)},
        }


# -- footprints of the training set ---------------------------------------------------------


def training_footprints(shapes: Mapping[str, SplitShape], cfg: PreloadConfig, placement: str,
                        cuda: bool, batch_size: int, buffer_chunks: int) -> list[Footprint]:
    """One footprint per split held while training (train shuffled, the others file order)."""
    return [estimate(shapes[s], cfg.dtype, batch_size, placement, cuda=cuda,
                     role=ROLE_TRAIN if s == TRAIN_SPLIT else ROLE_EVAL,
                     buffer_chunks=buffer_chunks)
            for s in TRAINING_SPLITS if s in shapes]


def _totals(footprints: list[Footprint]) -> tuple[int, int]:
    return sum(f.host_bytes for f in footprints), sum(f.device_bytes for f in footprints)


def stream_buffer_chunks(shape: SplitShape, cfg: PreloadConfig) -> int:
    """HDF5 chunks per stream window: two windows fit in ``stream_buffer_mb`` (at least one)."""
    chunk = shape.chunk_rows * shape.segments_per_file * shape.segment_values * \
        itemsize(shape.stored_dtype)
    chunks = -(-shape.files // max(1, shape.chunk_rows))  # a window never exceeds the split
    return max(1, min(chunks, int(cfg.stream_buffer_mb * MIB) // (2 * max(1, chunk))))


def _fit_buffer_chunks(shapes: Mapping[str, SplitShape], budget: Budget, cfg: PreloadConfig,
                       cap: int) -> int:
    """The stream window: ``cap`` chunks, fewer when the host cannot hold that (at least 1)."""
    usable = budget.host_usable(cfg.safety, cfg.host_reserve_mb)

    def host(chunks: int) -> int:
        return _totals(training_footprints(shapes, cfg, PLACEMENT_STREAM, budget.cuda,
                                           cfg.max_batch_size, chunks))[0]

    at_one, at_cap = host(1), host(cap)
    if at_cap <= usable or at_one >= usable or cap == 1:
        return cap if at_cap <= usable else 1
    per_chunk = (at_cap - at_one) / (cap - 1)
    return max(1, min(cap, 1 + int((usable - at_one) // per_chunk)))


# -- the decision ----------------------------------------------------------------------------


def choose_placement(shapes: Mapping[str, SplitShape], budget: Budget, cfg: PreloadConfig,
                     source: str = "<params>") -> Plan:
    """The plan for ``shapes`` (split -> shape; needs ``train``) under ``budget``."""
    if TRAIN_SPLIT not in shapes:
        raise ValueError("the train split is needed to plan training memory")
    buffer_chunks = _fit_buffer_chunks(shapes, budget, cfg,
                                       stream_buffer_chunks(shapes[TRAIN_SPLIT], cfg))
    candidates = tuple(_candidate(p, shapes, budget, cfg, buffer_chunks) for p in PLACEMENTS)
    chosen = _choose(candidates, cfg, source)
    cuda = budget.cuda
    batch_max = min(cfg.max_batch_size, chosen.batch_bound, shapes[TRAIN_SPLIT].segments)
    return Plan(
        placement=chosen.placement, device="cuda" if cuda else "cpu",
        pin_memory=cuda and chosen.placement != PLACEMENT_DEVICE, dtype=cfg.dtype,
        batch_size_max=max(1, batch_max), buffer_chunks=buffer_chunks,
        reason=_reason(chosen, candidates, cfg),
        candidates=candidates,
        estimates=_all_estimates(shapes, cfg, cuda, buffer_chunks),
        allocations=_allocations(shapes, chosen.placement, cfg, cuda))


def _candidate(placement: str, shapes: Mapping[str, SplitShape], budget: Budget,
               cfg: PreloadConfig, buffer_chunks: int) -> Candidate:
    host_usable = budget.host_usable(cfg.safety, cfg.host_reserve_mb)
    device_usable = budget.device_usable(cfg.safety, cfg.device_reserve_mb)
    if placement == PLACEMENT_DEVICE and not budget.cuda:
        why = budget.gpu_note or "no CUDA device"
        return Candidate(placement, False, False, 0, 0, 0, why)
    cuda = budget.cuda

    def totals(batch: int) -> tuple[int, int]:
        return _totals(training_footprints(shapes, cfg, placement, cuda, batch, buffer_chunks))

    host, device = totals(cfg.max_batch_size)
    base_host, base_device = totals(1)
    bound = _batch_bound(base_host, host, host_usable, base_device, device, device_usable,
                         cfg.max_batch_size, cuda)
    fits_one = base_host <= host_usable and (not cuda or base_device <= device_usable)
    fits_max = host <= host_usable and (not cuda or device <= device_usable)
    where = "GPU" if placement == PLACEMENT_DEVICE else "host RAM"
    need = device if placement == PLACEMENT_DEVICE else host
    have = device_usable if placement == PLACEMENT_DEVICE else host_usable
    why = f"needs {_gib(need)} of {where}, {_gib(have)} usable"
    if cuda and placement != PLACEMENT_DEVICE:
        why += f" (and {_gib(device)} of GPU, {_gib(device_usable)} usable)"
    return Candidate(placement, fits_one, fits_max, host, device, bound, why)


def _batch_bound(base_host: int, host: int, host_usable: int, base_device: int, device: int,
                 device_usable: int, max_batch: int, cuda: bool) -> int:
    """The largest batch that fits: footprints are affine in the batch size."""
    bounds = [_affine_bound(base_host, host, host_usable, max_batch)]
    if cuda:
        bounds.append(_affine_bound(base_device, device, device_usable, max_batch))
    return max(0, min(bounds))


def _affine_bound(at_one: int, at_max: int, usable: int, max_batch: int) -> int:
    if at_one > usable:
        return 0
    per_sample = (at_max - at_one) / max(1, max_batch - 1)
    if per_sample <= 0:
        return max_batch
    return 1 + int((usable - at_one) // per_sample)


def _choose(candidates: tuple[Candidate, ...], cfg: PreloadConfig, source: str) -> Candidate:
    by_name = {c.placement: c for c in candidates}
    if cfg.mode != "auto":
        chosen = by_name[cfg.mode]
        if not chosen.fits:
            raise ConfigError(f"{source}: preload.mode: {cfg.mode!r} does not fit: {chosen.why}"
                              f"; use mode auto or free memory")
        return chosen
    for fits in (lambda c: c.fits_max_batch, lambda c: c.fits):
        for candidate in candidates:
            if fits(candidate):
                return candidate
    reasons = "; ".join(f"{c.placement}: {c.why}" for c in candidates)
    raise ConfigError(f"{source}: preload.mode: no placement fits ({reasons})")


def _reason(chosen: Candidate, candidates: tuple[Candidate, ...], cfg: PreloadConfig) -> str:
    how = "forced by preload.mode" if cfg.mode != "auto" else "first that fits"
    text = f"{chosen.placement} ({how}): {chosen.why}"
    if not chosen.fits_max_batch:
        text += f"; batches limited to {chosen.batch_bound} (< max_batch_size)"
    others = [f"{c.placement}: {c.why}" for c in candidates
              if c.placement != chosen.placement and not c.fits_max_batch]
    return "; ".join([text, *others])


def _gib(nbytes: int) -> str:
    return human_bytes(nbytes)


def human_bytes(nbytes: int) -> str:
    """1536 -> '1.5 KiB'; binary units up to GiB."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


def _all_estimates(shapes: Mapping[str, SplitShape], cfg: PreloadConfig, cuda: bool,
                   buffer_chunks: int) -> dict[str, dict[str, Any]]:
    """Every split under every placement it can take here (for the report)."""
    placements = [p for p in PLACEMENTS if cuda or p != PLACEMENT_DEVICE]
    return {split: {p: estimate(shape, cfg.dtype, cfg.max_batch_size, p, cuda=cuda,
                                role=ROLE_TRAIN if split == TRAIN_SPLIT else ROLE_EVAL,
                                buffer_chunks=buffer_chunks).to_dict() for p in placements}
            for split, shape in shapes.items()}


def _allocations(shapes: Mapping[str, SplitShape], placement: str, cfg: PreloadConfig,
                 cuda: bool) -> dict[str, dict[str, Any]]:
    """What train must allocate per split under the chosen placement."""
    where = "cuda" if placement == PLACEMENT_DEVICE else "cpu"
    out = {}
    for split in (s for s in TRAINING_SPLITS if s in shapes):
        shape = shapes[split]
        entry: dict[str, Any] = {
            "file_labels": {"shape": [shape.files], "dtype": "int64",
                            "where": "cuda" if cuda else "cpu"}}
        if placement != PLACEMENT_STREAM:
            entry["segments"] = {"shape": list(shape.resident_shape()), "dtype": cfg.dtype,
                                 "where": where,
                                 "pinned": cuda and placement == PLACEMENT_RAM}
        if split == TRAIN_SPLIT and placement != PLACEMENT_STREAM:
            entry["index_pool"] = {"shape": [shape.segments], "dtype": "int64", "where": "cpu"}
            entry["epoch_order"] = {"shape": [shape.segments], "dtype": "int64", "where": where}
        out[split] = entry
    return out


__all__ = ["PLAN_FORMAT", "Plan", "TRAINING_SPLITS", "choose_placement", "human_bytes",
           "training_footprints"]


PLAN_KEYS = ("placement", "dtype", "stream")   # what every reader of the plan needs


def read_plan(path: Path) -> dict[str, Any]:
    """The preload stage's decision; a missing or foreign file is a ``DataError``."""
    try:
        plan = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no preload plan; run `dvc repro preload` first") from None
    except json.JSONDecodeError:
        raise DataError(f"{path}: preload plan is not valid JSON") from None
    missing = [k for k in PLAN_KEYS if k not in plan]
    if missing:
        raise DataError(f"{path}: preload plan lacks {missing[0]!r}")
    return plan
