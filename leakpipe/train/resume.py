"""Resume and continual learning: fill a ``RunState`` from checkpoints.

``restore`` picks, in ``checkpoint_dir``, the mid-epoch ``partial.pt`` when it is newer than
every epoch checkpoint, else the newest ``epoch-NNNN.pt``, else ``train.init_checkpoint``
(continual learning), else nothing. A resumed run must have the params, classes and data of
the run that wrote the checkpoint; ``RESUME_FREE_KEYS`` may change in between, and a key the
checkpoint predates counts as its ``ADDED_DEFAULTS`` value.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from leakpipe.config.training import with_added_defaults
from leakpipe.detector import DETECTOR_FORMAT, NETWORK_FORMAT
from leakpipe.train import checkpoint as ckpt_io
from leakpipe.train.state import RunState

log = logging.getLogger(__name__)

# Params that may change between an interrupted run and its resumption.
RESUME_FREE_KEYS = {"train": ("log_every_steps", "keep_last_checkpoints", "compile",
                              "compile_mode", "init_checkpoint", "reset_optimizer")}
NOTHING_DONE = -1   # the ``epoch`` of a checkpoint written before any epoch completed


def restore(run: RunState, directory: Path) -> Path | None:
    """Resume from ``directory`` (mid-epoch or epoch checkpoint), else init_checkpoint."""
    latest = ckpt_io.latest_checkpoint(directory)
    partial = _usable_partial(directory, latest)
    if partial is not None:
        resume(run, partial, ckpt_io.partial_path(directory))
        return ckpt_io.partial_path(directory)
    if latest is not None:
        resume(run, ckpt_io.load_checkpoint(latest, map_location="cpu"), latest)
        return latest
    if run.cfg.init_checkpoint:
        init_from(run, Path(run.cfg.init_checkpoint), run.cfg.reset_optimizer)
    return None


def resume_point(directory: Path) -> Path | None:
    """The file ``restore`` will resume ``directory`` from (None: nothing saved yet).

    A stop message names it, so it must be restore's own choice, not e.g. best.pt. Reads only:
    a stale partial.pt is dropped by ``restore``, not here.
    """
    latest = ckpt_io.latest_checkpoint(directory)
    path = ckpt_io.partial_path(directory)
    if not path.is_file():
        return latest
    try:
        partial = ckpt_io.load_checkpoint(path, map_location="cpu")
    except ckpt_io.CheckpointError:
        return path    # restore tries it, and its error names the file
    return path if _continues(partial, latest) else latest


def _usable_partial(directory: Path, latest: Path | None) -> dict[str, Any] | None:
    """The mid-epoch checkpoint when it continues the newest epoch checkpoint; stale -> None."""
    path = ckpt_io.partial_path(directory)
    if not path.is_file():
        return None
    ckpt = ckpt_io.load_checkpoint(path, map_location="cpu")
    if _continues(ckpt, latest):
        return ckpt
    log.info("ignoring %s: epoch checkpoint %s is newer", path, latest)
    ckpt_io.drop_partial(directory)
    return None


def _continues(partial: Mapping[str, Any], latest: Path | None) -> bool:
    """``partial`` (a mid-epoch checkpoint) is not older than the epoch checkpoint ``latest``."""
    done = NOTHING_DONE if latest is None else ckpt_io.load_checkpoint(latest)["epoch"]
    return int(partial["epoch"]) >= int(done) and "partial" in partial


def resume(run: RunState, ckpt: Mapping[str, Any], path: Path) -> None:
    """Load every piece of training state from ``ckpt`` (read from ``path`` onto the CPU)."""
    check_same_run(ckpt, run, path)
    ckpt_io.load_model_state(run.model, ckpt, path)
    run.optim.optimizer.load_state_dict(ckpt["optimizer"])
    run.optim.scheduler.load_state_dict(ckpt["scheduler"])
    run.optim.scaler.load_state_dict(ckpt["scaler"])
    run.stopper.load_state_dict(ckpt["early_stopping"])
    run.best.load_state_dict(ckpt["best"])
    run.history, run.diagnoses = list(ckpt["history"]), list(ckpt["diagnoses"])
    run.next_epoch, run.stop_reason = int(ckpt["epoch"]) + 1, str(ckpt["stop_reason"])
    run.pending = ckpt.get("partial")
    if ckpt.get("best_model") is not None:    # every checkpoint carries the best weights
        run.best_state, run.best_confusion = ckpt["best_model"], ckpt.get("best_confusion")
    else:
        _load_best(run, path.parent / ckpt_io.BEST_NAME)
    ckpt_io.set_rng_state(ckpt["rng"])
    where = f", mid-epoch {run.pending['epoch'] + 1}" if run.pending else ""
    log.info("resumed from %s (%d epochs done%s)", path, run.next_epoch, where)


def _load_best(run: RunState, best_path: Path) -> None:
    if best_path.is_file():
        best = ckpt_io.load_checkpoint(best_path)
        run.best_state, run.best_confusion = best["model"], best.get("confusion")


def check_same_run(ckpt: Mapping[str, Any], run: RunState, path: Path) -> None:
    """A resumed run must have the params, classes and data of the run that wrote ``ckpt``."""
    advice = f"delete {path.parent} to start over, or restore the params"
    if tuple(ckpt.get("class_names", ())) != run.class_names:
        raise ckpt_io.CheckpointError(f"{path}: classes {ckpt.get('class_names')} differ from "
                                      f"this run's {list(run.class_names)}; {advice}")
    saved = ckpt.get("config", {})
    for section, values in run.config.items():
        free = RESUME_FREE_KEYS.get(section, ())
        written = with_added_defaults(section, saved.get(section, {}))
        for key, value in values.items():
            old = written.get(key)
            if key not in free and old != value:
                raise ckpt_io.CheckpointError(f"{path}: written with {section}.{key} = {old!r}, "
                                              f"params now say {value!r}; {advice}")


def _init_source(path: Path, reset_optimizer: bool, input_norm: str,
                 level_input: bool) -> dict[str, Any]:
    """A training checkpoint as is, or a network / detector file (models/model.pt,
    models/detector.pt) as its weights and classes: what a user fine-tunes is usually the
    shipped detector."""
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError):
        raw = None  # load_checkpoint below names the problem
    if not (isinstance(raw, dict) and raw.get("format") in (NETWORK_FORMAT, DETECTOR_FORMAT)):
        ckpt = ckpt_io.load_checkpoint(path, map_location="cpu")
        _check_level_input(path, ckpt.get("config", {}).get("model", {}), level_input)
        return ckpt
    if not reset_optimizer:
        raise ckpt_io.CheckpointError(f"train.init_checkpoint: {path} is a network file, which "
                                      f"holds no optimizer state; set train.reset_optimizer: true")
    if raw.get("input_norm", "none") != input_norm:
        raise ckpt_io.CheckpointError(f"train.init_checkpoint: {path} expects input_norm "
                                      f"{raw.get('input_norm', 'none')!r}, params say "
                                      f"{input_norm!r}")
    _check_level_input(path, raw.get("model_config", {}), level_input)
    return {"model": raw["model"], "class_names": raw["class_names"]}


def _check_level_input(path: Path, model_cfg: Mapping[str, Any], level_input: bool) -> None:
    """The weights' network must be this run's (a clearer message than a state-dict error)."""
    saved = with_added_defaults("model", model_cfg)["level_input"]
    if saved != level_input:
        raise ckpt_io.CheckpointError(f"train.init_checkpoint: {path} has model.level_input "
                                      f"{saved}, params say {level_input}")


def init_from(run: RunState, path: Path, reset_optimizer: bool) -> None:
    """Continual learning: start from another run's weights (and optimizer moments)."""
    level_input = bool(run.config.get("model", {}).get("level_input", False))
    ckpt = _init_source(path, reset_optimizer, run.cfg.input_norm, level_input)
    if tuple(ckpt.get("class_names", ())) != run.class_names:
        raise ckpt_io.CheckpointError(f"train.init_checkpoint: {path} was trained on classes "
                                      f"{ckpt.get('class_names')}, this run has "
                                      f"{list(run.class_names)}")
    ckpt_io.load_model_state(run.model, ckpt, path)
    if not reset_optimizer:
        # Moments only: this run's own hyper-parameters and schedule stay in charge.
        current = run.optim.optimizer.state_dict()
        run.optim.optimizer.load_state_dict({"state": ckpt["optimizer"]["state"],
                                             "param_groups": current["param_groups"]})
        run.optim.scaler.load_state_dict(ckpt["scaler"])
    log.info("initialised from %s (optimizer %s)", path,
             "reset" if reset_optimizer else "moments kept")
