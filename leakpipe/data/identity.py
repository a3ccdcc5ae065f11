"""One recording, one row: a source that names a file twice, or holds a copy of it, is refused.

A manifest can name one file by two path texts (``recs/LEAK/a.wav`` and ``recs/./LEAK/a.wav``,
``NOLEAK/../LEAK/a.wav``, a symlink), and a folder can hold a byte-identical copy under another
name. Split and fold assignment would then place the copies apart, and a model would be scored
on a recording it was trained on. ``unique_recordings`` compares every row by

- the resolved path (``os.path.realpath``), always;
- the content (SHA-256, streamed: ``leakpipe.files.file_sha256``, what stage `index` hashes
  with), for files that share their byte size and their first ``HEAD_BYTES`` with another
  file: any other file cannot be a byte-identical copy. Recordings of one logger often have
  one size (a fixed duration and format: the 1,680 synth WAVs have 4 sizes), so the size alone
  would still hash them all; the head separates them for a 16 KiB read each (measured on the
  synth set, warm cache: the whole comparison adds 0.10-0.14 s to reading the manifest, where
  hashing its 450 MiB whole took 0.4-1.5 s, and the build itself ~7 s).

Two rows that are one recording under two classes or two groups are always refused, naming
both rows; two under the same class and group are refused too unless ``build.duplicates`` is
``drop`` (then the first row is kept). A row that is not a readable regular file is left
alone: `build` reports it as unusable with its reason.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from leakpipe.errors import DataError
from leakpipe.files import file_problem, file_sha256


@dataclass(frozen=True)
class Recording:
    """One source recording: where it is, its class and its group (site / sensor). (Here, not
    in ``manifest``, which reads them: identity compares them and must not import its reader.)"""

    path: Path
    recording_id: str
    label: str
    group: str


log = logging.getLogger(__name__)

DUPLICATES: tuple[str, ...] = ("refuse", "drop")   # build.duplicates
SAME_FILE = "the same file"
HEAD_BYTES = 2**14   # bytes compared before a whole file is hashed (any header and some audio)


def identities(recordings: Sequence[Recording]) -> list[str]:
    """A key per row, equal exactly for rows that are one file or byte-identical files:
    ``sha256:<digest>`` for a file that shares its size and first ``HEAD_BYTES`` with another
    file, ``path:<realpath>`` for any other; a row whose path does not open as a non-empty
    regular file gets a key of its own (`build` reports it, and no content can leak)."""
    rows = [(os.path.realpath(r.path), n) if (n := _size(Path(r.path))) else None
            for r in recordings]
    size = dict(row for row in rows if row is not None)          # real path -> bytes
    real = [row[0] if row is not None else None for row in rows]
    sizes = Counter(size.values())
    head = {p: _read(_head_digest, p) for p, s in size.items() if s and sizes[s] > 1}
    heads = Counter((size[p], h) for p, h in head.items() if h is not None)
    digest = {p: _read(file_sha256, p) for p, h in head.items()
              if h is not None and heads[size[p], h] > 1}
    return [f"row:{i}" if p is None else f"sha256:{digest[p]}" if digest.get(p) else f"path:{p}"
            for i, p in enumerate(real)]


def _size(path: Path) -> int | None:
    """The byte size of a readable regular file; None for anything `build` will reject: an
    empty file holds no recording (two of them are not one recording twice)."""
    if file_problem(path):
        return None
    try:
        return path.stat().st_size or None
    except OSError:
        return None


def _head_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.sha256(handle.read(HEAD_BYTES)).hexdigest()


def _read(digest: Callable[[Path], str], real: str) -> str | None:
    """``digest`` of a file; None when it cannot be read (`build` reports why)."""
    try:
        return digest(Path(real))
    except OSError:
        return None


def unique_recordings(recordings: Sequence[Recording], source: Path,
                      duplicates: str = "refuse") -> list[Recording]:
    """``recordings`` without repeats (``duplicates`` = ``drop``); a ``DataError`` naming both
    rows for one recording under two classes or groups, or for any repeat with ``refuse``."""
    if duplicates not in DUPLICATES:
        raise ValueError(f"duplicates must be one of {DUPLICATES}, got {duplicates!r}")
    first: dict[str, Recording] = {}
    kept: list[Recording] = []
    dropped: list[tuple[Recording, Recording]] = []
    for rec, key in zip(recordings, identities(recordings), strict=True):
        earlier = first.setdefault(key, rec)
        if earlier is rec:
            kept.append(rec)
            continue
        same = os.path.realpath(earlier.path) == os.path.realpath(rec.path)
        how = SAME_FILE if same else "byte-identical files"
        _refuse_conflict(source, earlier, rec, how)
        if duplicates == "refuse":
            raise DataError(f"{source}: {earlier.recording_id!r} and {rec.recording_id!r} "
                            f"({rec.label}, group {rec.group}) are {how}, listed twice; list "
                            "it once, or set build.duplicates: drop to keep the first")
        dropped.append((earlier, rec))
    if dropped:
        earlier, rec = dropped[0]
        log.info("%s: dropped %d duplicate recording(s) (build.duplicates: drop), first: %r "
                 "(same as %r)", source, len(dropped), rec.recording_id, earlier.recording_id)
    return kept


def _refuse_conflict(source: Path, a: Recording, b: Recording, how: str) -> None:
    """One recording under two classes or two groups: no option makes that right."""
    differ = [what for what, same in (("classes", a.label == b.label),
                                      ("groups", a.group == b.group)) if not same]
    if differ:
        raise DataError(f"{source}: {a.recording_id!r} ({a.label}, group {a.group}) and "
                        f"{b.recording_id!r} ({b.label}, group {b.group}) are {how}: one "
                        f"recording under two {' and two '.join(differ)}; list it once")
