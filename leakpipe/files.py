"""Atomic file writes (every output is whole, old or new, never partial), content hashes, and
what a listed path is when it is not a file to read.

A stage killed in the middle of a write must not leave a truncated metrics file that DVC then
caches, nor a checkpoint that cannot be read. Every writer here writes to a hidden temporary
sibling, flushes it to disk, renames it over the target (``os.replace`` is atomic on one file
system) and makes the rename durable. The temporary file is removed when anything fails.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
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


# -- listed paths that are not files to read ---------------------------------------------------
# A folder or a manifest lists names; behind a name can be a folder, a symlink that loops or
# points nowhere, a pipe. `build`, `predict` and `index` take the reason from here, so that a
# listed entry is never dropped without a word, nor called missing when it is something else.

_ERRNO_REASONS = {errno.ENOENT: "no such file", errno.ELOOP: "symlink loop",
                  errno.EISDIR: "is a directory"}
_KINDS = ((stat.S_ISDIR, "is a directory"), (stat.S_ISFIFO, "not a regular file (a pipe)"),
          (stat.S_ISSOCK, "not a regular file (a socket)"),
          (stat.S_ISCHR, "not a regular file (a character device)"),
          (stat.S_ISBLK, "not a regular file (a block device)"))


def file_problem(path: Path) -> str:
    """Why ``path`` is not a regular file (after symlinks), or "" when it is one."""
    try:
        mode = Path(path).stat().st_mode
    except OSError as exc:
        return os_problem(path, exc)
    if stat.S_ISREG(mode):
        return ""
    return next((reason for test, reason in _KINDS if test(mode)), "not a regular file")


def os_problem(path: Path, exc: OSError) -> str:
    """An ``OSError`` met on ``path`` as a short reason without the path (``symlink loop``
    rather than ``Too many levels of symbolic links``, a dangling symlink named as one)."""
    if exc.errno == errno.ENOENT and Path(path).is_symlink():
        return f"broken symlink (points to {os.readlink(path)})"
    reason = _ERRNO_REASONS.get(exc.errno or 0) or exc.strerror or str(exc)
    return reason[:1].lower() + reason[1:]


def listed_entries(folder: Path, suffixes: Collection[str]) -> list[Path]:
    """Every entry below ``folder`` whose name ends in one of ``suffixes`` (lower case; names
    match in any case), sorted, whatever it is: a folder or a broken symlink so named is listed
    as well, for its reader to report (``file_problem``). Symlinked folders are not entered."""
    return sorted(p for p in Path(folder).rglob("*") if p.suffix.lower() in suffixes)
