"""Stage `index`: a content hash of every recording `build` reads, so DVC sees when one changes.

DVC hashes only the deps dvc.yaml declares. `build.source` can be a manifest whose recordings
lie anywhere, which DVC never sees, and a folder dep also counts files `build` ignores. `index`
(``always_changed`` in dvc.yaml) re-hashes every recording `build` would read on each
`dvc repro` and writes ``reports/recordings.json``; `build` depends on that file, so it runs
again exactly when a recording's bytes, the manifest or the set of recordings changed. Hashes
are SHA-256 of the content, streamed (sizes and times alone would miss a same-size edit):
``leakpipe.files.file_sha256``, the digest the manifest reader compares copies by.

Hashing runs on ``build.workers`` threads here, or, given a scheduler, on the workers of a
Dask cluster, chunks of recordings per task (``leakpipe.cluster``); the index is the same
either way (it holds nothing about where it was computed, or `build` would run again).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from tqdm import tqdm

from leakpipe.cluster import ClusterSettings, Session, connect
from leakpipe.config import load_section
from leakpipe.data.manifest import Recording, discover, manifest_of
from leakpipe.files import file_problem, file_sha256, os_problem, write_json_atomic

log = logging.getLogger(__name__)

INDEX_FORMAT = 1
HASH = "sha256"

# SHA-256 of a file's bytes, streamed (hashing releases the GIL: threads scale)
file_digest = file_sha256


def entry(rec: Recording) -> dict[str, Any]:
    """One recording's line of the index; a file that cannot be read is listed with why, in
    the words of build's report (``leakpipe.files.file_problem``)."""
    problem = file_problem(rec.path)
    if not problem:
        try:
            return {"path": rec.recording_id, "bytes": rec.path.stat().st_size,
                    HASH: file_digest(rec.path)}
        except OSError as exc:
            problem = os_problem(rec.path, exc)
    # build lists it as unusable; the index only records the state
    return {"path": rec.recording_id, "bytes": None, HASH: None, "error": problem}


def chunk_entries(recordings: list[Recording]) -> list[dict[str, Any]]:
    """A cluster task: the lines of consecutive recordings."""
    return [entry(rec) for rec in recordings]


def _killed(rec: Recording, reason: str) -> dict[str, Any]:
    """A recording that killed every Dask worker that hashed it: listed, as unreadable."""
    return {"path": rec.recording_id, "bytes": None, HASH: None, "error": reason}


def index_recordings(source: Path, workers: int = 1, progress: bool = False,
                     duplicates: str = "refuse",
                     session: Session | None = None) -> dict[str, Any]:
    """The index of ``source`` (manifest file, folder with manifest, or class folders): the
    recordings `build` reads, so ``duplicates`` is ``build.duplicates``; hashed on
    ``workers`` threads, or on ``session``'s Dask workers."""
    manifest = manifest_of(source)
    recordings = discover(source, "file", duplicates)  # grouping is build's business
    entries = _mapped(recordings, workers, progress, session)
    return {"format": INDEX_FORMAT,
            "manifest": {"path": manifest.name, HASH: file_digest(manifest)} if manifest else None,
            "n_recordings": len(entries),
            "bytes": sum(e["bytes"] or 0 for e in entries),
            "recordings": entries}


def _mapped(items: list[Recording], workers: int, progress: bool,
            session: Session | None) -> list[dict[str, Any]]:
    """``entry`` over ``items`` in order, on ``workers`` threads or ``session``'s workers."""
    def bar(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(tqdm(results, total=len(items), desc="index", unit="rec",
                         disable=not progress))

    if session is not None:  # absolute paths: a worker's working folder is not this one
        here = [dataclasses.replace(rec, path=rec.path.absolute()) for rec in items]
        return bar(session.map(chunk_entries, here, on_killed=_killed))
    if workers <= 1:
        return bar(map(entry, items))
    with ThreadPoolExecutor(workers) as pool:
        return bar(pool.map(entry, items))


def run_index(params: Path, source: Path | None, out: Path, *, progress: bool = True,
              cluster: ClusterSettings | None = None) -> int:
    """The whole stage (``build.source`` unless ``source``), on threads here or on the Dask
    ``cluster``; returns the exit code."""
    cfg = load_section(params, "build")
    source = source or Path(cfg.source)
    workers = cfg.workers or os.cpu_count() or 1
    with connect(cluster) if cluster is not None else nullcontext() as session:
        index = index_recordings(source, workers, progress=progress,
                                 duplicates=cfg.duplicates, session=session)
    write_json_atomic(out, index)
    log.info("index: %d recordings (%.1f MiB) of %s -> %s", index["n_recordings"],
             index["bytes"] / 2**20, source, out)
    return 0
