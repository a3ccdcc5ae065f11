"""Atomic file writes (every output is whole, old or new, never partial) and content hashes.

A stage killed in the middle of a write must not leave a truncated metrics file that DVC then
caches, nor a checkpoint that cannot be read. Every writer here writes to a hidden temporary
sibling, flushes it to disk, renames it over the target (``os.replace`` is atomic on one file
system) and makes the rename durable. The temporary file is removed when anything fails.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"
HASH_BLOCK = 2**22   # bytes read per step when hashing a file
TEST_WRITE_PAUSE_ENV = "LEAKPIPE_TEST_WRITE_PAUSE_S"   # test hook (``_test_write_pause``)
TEST_WRITE_PAUSE_MARK = "leakpipe test hook: write pause"


def temporary_sibling(path: Path) -> Path:
    """Where ``path`` is written before it is renamed into place (hidden, same folder)."""
    return path.with_name(f"{TMP_PREFIX}{path.name}{TMP_SUFFIX}")


def write_atomic(path: Path, write: Callable[[IO[bytes]], None], *,
                 before_replace: Callable[[Path, Path], None] | None = None) -> None:
    """Call ``write(handle)`` on a temporary sibling, fsync, rename onto ``path``;
    ``before_replace(tmp, path)`` runs between the fsync and the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if before_replace is not None:
            before_replace(tmp, path)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, lambda handle: handle.write(data))


def write_text_atomic(path: Path, text: str) -> None:
    """UTF-8 text; newlines are written as given (no platform translation)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def json_text(data: Any) -> str:
    """The one JSON layout of leakpipe's outputs: indented, sorted keys, trailing newline."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json_text(data))


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows -> CSV text with a header; ``columns`` defaults to the first row's keys."""
    buffer = io.StringIO()
    fields = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_csv_atomic(path: Path, rows: Sequence[Mapping[str, Any]],
                     columns: Sequence[str] | None = None) -> None:
    write_text_atomic(path, csv_text(rows, columns))


def save_torch_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` of ``obj`` to ``path``, atomically (checkpoints and detector files)."""
    import torch

    write_atomic(path, lambda handle: torch.save(obj, handle), before_replace=_test_write_pause)


def _test_write_pause(tmp: Path, path: Path) -> None:
    """Test hook for the fault-injection tests (tests/test_faults.py); inert unless the
    environment sets ``LEAKPIPE_TEST_WRITE_PAUSE_S``.

    When set, a torch file's write prints ``<TEST_WRITE_PAUSE_MARK> <tmp> -> <path>`` to stderr
    and sleeps that many seconds between the fsynced temporary file and its rename, so a test
    can SIGKILL the process inside a checkpoint write.
    """
    seconds = os.environ.get(TEST_WRITE_PAUSE_ENV)
    if not seconds:
        return
    print(f"{TEST_WRITE_PAUSE_MARK} {tmp} -> {path}", file=sys.stderr, flush=True)
    time.sleep(float(seconds))


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes, read in blocks (HDF5 splits are large)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(HASH_BLOCK):
            digest.update(chunk)
    return digest.hexdigest()
