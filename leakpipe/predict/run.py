"""``run_predict``: `leakpipe predict REC... --model PATH_OR_URI --out CSV`, any detector kind.

One row per recording, the verdict first: LEAK, NOLEAK, UNCERTAIN (the recording, or the set of
them, is unlike the training recordings) or UNUSABLE (a signal build's checks refuse: no call);
the calibrated ``leak_prob`` and the ``threshold`` on that scale; the domain check; the kind's
own columns (a CNN's long-segment timeline, a statistics kind's ``raw_score`` and
``top_statistic``). How a kind scores its recordings is the kind's
(``leakpipe.detectors.registry.kind_of(detector).predict``: ``predict.clips`` for a CNN,
``predict.stats`` and ``predict.fused`` for the kinds of one verdict per recording).

What the command refuses before it scores anything, each with one line and a non-zero exit
(``predict.target``): a path that is not there or a selection without a recording, an ``--out``
that is one of the recordings, exists (without ``--resume`` or ``--force``) or cannot be
written, and ``--resume`` of a CSV that another detector wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leakpipe import tracking
from leakpipe.allocator import retain_freed_memory
from leakpipe.detectors.interface import PredictJob
from leakpipe.detectors.registry import kind_of, load_any_detector
from leakpipe.predict.inputs import select_recordings
from leakpipe.predict.target import check_target
from leakpipe.runtime import make_runtime

__all__ = ["load", "resolve_model", "run_predict"]


def resolve_model(spec: str) -> Path:
    """A local detector file for a path or an MLflow URI (``models:/...``, ``runs:/...``)."""
    return tracking.download_model(spec) if tracking.is_model_uri(spec) else Path(spec)


def load(spec: str) -> Any:
    """The detector (any kind) named by a path or an MLflow model URI."""
    return load_any_detector(resolve_model(spec))


def run_predict(paths: Sequence[Path], model: str, out: Path, params: Path, *,
                device: str = "auto", resume: bool = False, force: bool = False,
                progress: bool = True, max_batch_segments: int | None = None) -> int:
    """The whole command; returns the exit code (errors raise ``LeakpipeError``).

    The recordings and ``out`` are checked before the detector is loaded (``predict.target``);
    ``force`` replaces an existing ``out``, ``resume`` continues it.
    """
    recordings = select_recordings(paths)
    check_target(out, recordings, resume=resume, force=force)
    runtime = make_runtime(device, "auto", device_key="--device")
    retain_freed_memory()                 # CPU inference reuses its activation buffers
    file = resolve_model(model)
    detector = load_any_detector(file)
    kind_of(detector).predict(detector, PredictJob(
        paths=paths, out=out, model=model, file=file, params=params, runtime=runtime,
        resume=resume, progress=progress, max_batch_segments=max_batch_segments))
    return 0
