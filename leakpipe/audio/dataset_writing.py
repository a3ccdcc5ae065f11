"""What every synthetic data set's writer shares: the render pool, the folder swap, the summary.

The benchmark (``leakpipe.audio.synth``), the small network (``leakpipe.audio.network``) and the
field set (``leakpipe.audio.field``) each render their recordings through ``rendered`` (in
order, in a spawn-context pool when asked: every recording has its own generator, so the pool
changes no byte) into a hidden ``sibling`` folder that ``swap_into_place`` puts in place of the
output only when complete, so a failure never leaves a partial data set.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SynthSummary:
    """What a scenario's writer (``generate``, ``generate_network``) wrote."""

    n_recordings: int
    class_counts: Mapping[str, int]
    n_sites: int
    seconds: float
    out_dir: Path

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["class_counts"] = dict(self.class_counts)
        out["out_dir"] = str(self.out_dir)
        return out


def rendered(jobs: Sequence[Any], workers: int,
             render: Callable[[Any], Any]) -> Iterator[Any]:
    """``render(job)`` of every job in order; a spawn-context pool when ``workers > 1``
    (``render`` must then be a module-level function).

    Every recording has its own generator, so the pool changes no byte of the output.
    """
    if workers <= 1:
        yield from (render(job) for job in jobs)
        return
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(render, jobs, chunksize=4)


def sibling(path: Path, tag: str) -> Path:
    """A new, empty, hidden folder beside ``path`` (created with the usual permissions)."""
    folder = path.with_name(f".{path.name}.{tag}-{uuid.uuid4().hex[:8]}")
    folder.mkdir()
    return folder


def swap_into_place(tmp: Path, out_dir: Path) -> None:
    """Replace ``out_dir`` by ``tmp``; an existing ``out_dir`` is removed only after the swap."""
    if not out_dir.exists():
        tmp.rename(out_dir)
        return
    old = sibling(out_dir, "old")
    out_dir.rename(old / out_dir.name)
    try:
        tmp.rename(out_dir)
    except OSError:
        (old / out_dir.name).rename(out_dir)
        old.rmdir()
        raise
    shutil.rmtree(old)
