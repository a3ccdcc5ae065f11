"""Versioned, atomically written training checkpoints (timm-style) and auto-resume.

One dict per checkpoint (see ``make_checkpoint``); the model is stored unwrapped (no
``_orig_mod.`` / ``module.`` prefixes). Saving is synchronous: ``torch.save`` into a temporary
file in the same folder, fsync, ``os.replace`` (the original saved from a thread pool and lost
saves). Every value is a tensor or a plain type, so ``torch.load`` runs with
``weights_only=True``.

A run stopped mid-epoch (SIGINT / SIGTERM) writes ``partial.pt``: the state after its last
optimizer step plus a ``partial`` entry (the epoch, the batch source's position, the epoch's
accumulators). It supersedes the epoch checkpoints only while it is newer than all of them.

A kill inside a write (SIGKILL, OOM, power) leaves that write's hidden temporary file
(``.partial.pt.tmp``, ``.epoch-0003.pt.tmp``, ...; ``leakpipe.files.temporary_sibling``), which
no later write of another name replaces: ``clear_temporaries`` deletes exactly those names (never
any other file of the folder) when a run starts or resumes, and ``clear_if_finished`` with the
rest of a finished run.

The train stage marks a folder ``finished`` once its outputs are written; the next run into
that folder (DVC re-runs train only when params, code or data changed) starts fresh instead of
resuming a run that already ended. Only an unfinished run (crash, signal) is resumed.
"""

from __future__ import annotations

import logging
import pickle
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from leakpipe.errors import LeakpipeError
from leakpipe.files import TMP_PREFIX, TMP_SUFFIX, save_torch_atomic, temporary_sibling
from leakpipe.model import model_state, strip_prefixes, unwrap

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
EPOCH_NAME = "epoch-{epoch:04d}.pt"
EPOCH_RE = re.compile(r"^epoch-(\d{4,})\.pt$")
BEST_NAME = "best.pt"
PARTIAL_NAME = "partial.pt"
FINISHED_NAME = "finished"
RUN_ID_NAME = "run_id"        # the MLflow run of the latest attempt (train stage)
WRITTEN_NAMES = (BEST_NAME, PARTIAL_NAME, RUN_ID_NAME)   # atomically written, besides EPOCH_RE
REQUIRED_KEYS = ("version", "model", "epoch")


class CheckpointError(LeakpipeError):
    """A checkpoint that cannot be read or does not fit this run; the message names the file."""


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU (and CUDA) generator states as tensors / plain types."""
    py_version, py_keys, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state = {
        "python": {"version": py_version, "keys": torch.tensor(py_keys, dtype=torch.int64),
                   "gauss": py_gauss},
        "numpy": {"name": np_name, "keys": torch.from_numpy(np_keys.astype(np.int64)),
                  "pos": int(np_pos), "has_gauss": int(np_has_gauss), "gauss": float(np_gauss)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    py, npy = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(py["keys"].tolist()), py["gauss"]))
    np.random.set_state((npy["name"], npy["keys"].numpy().astype(np.uint32), npy["pos"],
                         npy["has_gauss"], npy["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def make_checkpoint(*, model: nn.Module, epoch: int, step: int, **parts: Any) -> dict[str, Any]:
    """The one checkpoint dict: version, unwrapped model, epoch, step, RNG states, ``parts``.

    ``parts`` holds optimizer, scheduler, scaler, sampler, early_stopping, best, history,
    config (dicts of the params sections), class_names and features, and from ``fit`` the
    best epoch's weights and confusion matrices (``best_model``, ``best_confusion``).
    """
    return {"version": CHECKPOINT_VERSION, "model": model_state(model), "epoch": epoch,
            "step": step, "rng": rng_state(), **parts}


def epoch_path(directory: Path, epoch: int) -> Path:
    return directory / EPOCH_NAME.format(epoch=epoch)


def epoch_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(epoch, path) of every complete epoch checkpoint, oldest first."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir()
             if (m := EPOCH_RE.match(p.name)) and p.is_file()]
    return sorted(found)


def latest_checkpoint(directory: Path) -> Path | None:
    found = epoch_checkpoints(directory)
    return found[-1][1] if found else None


def save_checkpoint(ckpt: Mapping[str, Any], directory: Path, *, keep_last: int,
                    is_best: bool) -> Path:
    """Write best.pt (when ``is_best``), then epoch-NNNN.pt, then drop all but the last k.

    The epoch checkpoint is written last: it is what a resume starts from, and it carries the
    best epoch's weights itself (``best_model``), so a crash between the two writes cannot pair
    it with a stale best.pt.
    """
    path = epoch_path(directory, int(ckpt["epoch"]))
    if is_best:
        save_torch_atomic(ckpt, directory / BEST_NAME)
    save_torch_atomic(ckpt, path)
    prune(directory, keep_last)
    log.debug("checkpoint %s%s", path, " (best)" if is_best else "")
    return path


def prune(directory: Path, keep_last: int) -> list[Path]:
    """Delete epoch checkpoints older than the newest ``keep_last``; best.pt is kept."""
    old = [p for _, p in epoch_checkpoints(directory)[:-keep_last]]
    for path in old:
        path.unlink()
    return old


def partial_path(directory: Path) -> Path:
    return directory / PARTIAL_NAME


def save_partial(ckpt: Mapping[str, Any], directory: Path) -> Path:
    """Write the mid-epoch checkpoint (one per folder, replaced atomically)."""
    path = partial_path(directory)
    save_torch_atomic(ckpt, path)
    log.debug("mid-epoch checkpoint %s", path)
    return path


def drop_partial(directory: Path) -> None:
    """Forget a mid-epoch checkpoint once a later epoch checkpoint exists."""
    partial_path(directory).unlink(missing_ok=True)


def mark_finished(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / FINISHED_NAME).touch()


def clear_if_finished(directory: Path) -> bool:
    """Delete the checkpoints of a finished run (so a new run starts fresh); True if it did."""
    marker = directory / FINISHED_NAME
    if not marker.is_file():
        return False
    for _, path in epoch_checkpoints(directory):
        path.unlink()
    for name in (BEST_NAME, PARTIAL_NAME, FINISHED_NAME, RUN_ID_NAME):
        (directory / name).unlink(missing_ok=True)
    clear_temporaries(directory)
    log.info("%s held a finished run: starting fresh", directory)
    return True


def is_own_temporary(path: Path) -> bool:
    """``path`` is the temporary sibling of a file this folder's writers write (a checkpoint or
    ``run_id``): the only hidden files ``clear_temporaries`` may delete."""
    target = path.name.removeprefix(TMP_PREFIX).removesuffix(TMP_SUFFIX)
    ours = target in WRITTEN_NAMES or EPOCH_RE.match(target) is not None
    return ours and temporary_sibling(path.with_name(target)) == path


def clear_temporaries(directory: Path) -> list[Path]:
    """Delete what killed checkpoint writes left behind (call before anything writes here)."""
    if not directory.is_dir():
        return []
    stale = sorted(p for p in directory.iterdir() if p.is_file() and is_own_temporary(p))
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        log.info("removed %d temporary file(s) of interrupted checkpoint writes in %s: %s",
                 len(stale), directory, ", ".join(p.name for p in stale))
    return stale


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load with ``weights_only=True`` and check the version and the required keys."""
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint ({first})") from None
    if not isinstance(ckpt, dict) or any(k not in ckpt for k in REQUIRED_KEYS):
        raise CheckpointError(f"{path}: not a leakpipe checkpoint (keys {REQUIRED_KEYS} expected)")
    if ckpt["version"] != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: checkpoint version {ckpt['version']}, this leakpipe "
                              f"reads {CHECKPOINT_VERSION}")
    return ckpt


def load_model_state(model: nn.Module, ckpt: Mapping[str, Any], path: Path) -> None:
    """Load the stored weights into the unwrapped ``model``; a mismatch names the file."""
    try:
        unwrap(model).load_state_dict(strip_prefixes(ckpt["model"]))
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise CheckpointError(f"{path}: weights do not fit this model ({first})") from None
