"""A SQLite store that follows its folder: artifact locations rewritten after a move or a copy.

MLflow records every artifact location as an absolute path when it creates an experiment, a
run or a logged model (a relative one is resolved against the working directory at that
moment), so a project folder that is moved or copied keeps pointing at the old folder: its UI
shows the old folder's files (or none) and new runs write there. leakpipe lays a SQLite store
out as ``<store folder>/mlflow.db`` with the artifacts in ``<store folder>/artifacts``
(``runs.artifact_root``); an experiment whose location is an ``artifacts`` folder elsewhere
tells where the store was made (``moved_from``). ``repoint`` rewrites every location under
that old folder to the same place under the store's folder now: experiments, runs, logged
models, model versions and trace locations, in one transaction. It edits MLflow's own tables
(MLflow has no call that changes an experiment's or a run's artifact location); a table or
column that a store's schema lacks is skipped.

``follow_move`` is the automatic form that ``start_run`` and ``leakpipe ui`` use: it repoints
only when the artifacts came along (a run recorded under the old folder has its folder beside
the store now, or no run has any), and otherwise leaves the store alone with one WARNING that
names ``leakpipe tracking repoint``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

log = logging.getLogger(__name__)

ARTIFACTS_DIR = "artifacts"          # a leakpipe store's artifacts: beside its mlflow.db
SQLITE_PREFIX = "sqlite:///"
BUSY_TIMEOUT_S = 30.0                # another process writing the store: wait this long
# (table, column) pairs that hold artifact locations, and the trace tag that holds one
LOCATION_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"),
                    ("logged_models", "artifact_location"), ("model_versions", "source"),
                    ("model_versions", "storage_location"))
TRACE_TAGS = ("trace_tags", "value", "key", "mlflow.artifactLocation")
EVIDENCE_RUNS = 50                   # runs checked for their folder beside the moved store


@dataclass(frozen=True)
class Repointed:
    """What ``repoint`` rewrote (or would, ``dry_run``): old store folders, the new one, and
    the rows changed per ``table.column``."""

    old: tuple[Path, ...]
    new: Path
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.rows.values())

    def summary(self) -> str:
        if not self.old:
            return f"every artifact location already lies under {self.new}"
        counts = ", ".join(f"{n} {name}" for name, n in self.rows.items() if n) or "no rows"
        return f"{', '.join(map(str, self.old))} -> {self.new}: {counts}"


def store_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI; None for any other store."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    return Path(uri.removeprefix(SQLITE_PREFIX).split("?", 1)[0])


def local_path(location: str | None) -> Path | None:
    """A local artifact location (``file://`` URI or absolute path) as a path; else None."""
    if not location:
        return None
    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path))
    path = Path(location)
    return path if path.is_absolute() else None


def moved_from(db: Path) -> list[Path]:
    """The folders this store was made in before it was moved or copied: the parents of the
    experiments' local ``artifacts`` locations that are not the store's own folder."""
    here = _folder(db).resolve()
    with _connect(db) as con:
        locations = [row[0] for row in con.execute(
            "SELECT artifact_location FROM experiments")]
    old = {path.parent for path in map(local_path, locations)
           if path is not None and path.name == ARTIFACTS_DIR
           and path.parent.resolve() != here}
    return sorted(old)


def repoint(db: Path, old: Sequence[Path] | None = None, *, dry_run: bool = False) -> Repointed:
    """Rewrite every artifact location under each folder of ``old`` (``moved_from`` when
    None) to the same place under the store's folder; with ``dry_run`` only count them."""
    new = _folder(db)
    folders = tuple(Path(p) for p in (moved_from(db) if old is None else old))
    folders = tuple(p for p in folders if p.resolve() != new.resolve())
    rows: dict[str, int] = {}
    with _connect(db) as con:
        columns = _columns(con)
        for table, column in LOCATION_COLUMNS:
            if column in columns.get(table, ()):
                rows[table] = rows.get(table, 0) + _rewrite(con, table, column, folders, new,
                                                            dry_run)
        table, column, key_column, key = TRACE_TAGS
        if {column, key_column} <= columns.get(table, set()):
            rows["trace locations"] = _rewrite(con, table, column, folders, new, dry_run,
                                               where=(key_column, key))
    return Repointed(folders, new, rows)


def follow_move(db: Path) -> Repointed | None:
    """Repoint a moved or copied store whose artifacts came along; None when nothing moved
    or the artifacts are not beside the store (one WARNING then: the store is left alone)."""
    if not db.is_file():
        return None
    old = moved_from(db)
    if not old:
        return None
    here = _folder(db)
    if not _artifacts_came_along(db, old, here):
        log.warning("the MLflow store %s records its artifacts under %s, and they are not "
                    "in %s; left as it is (after moving the artifacts there, run `leakpipe "
                    "tracking repoint`)", db, ", ".join(map(str, old)), here / ARTIFACTS_DIR)
        return None
    result = repoint(db, old)
    log.info("the MLflow store was moved: artifact locations repointed, %s", result.summary())
    return result


def _artifacts_came_along(db: Path, old: Iterable[Path], here: Path) -> bool:
    """True when a run recorded under an old folder has its artifact folder under ``here``,
    or when no run recorded there has a folder anywhere (nothing to lose)."""
    relative: list[Path] = []
    with _connect(db) as con:
        uris = [row[0] for row in con.execute(
            "SELECT artifact_uri FROM runs ORDER BY start_time DESC LIMIT ?", (EVIDENCE_RUNS,))]
    for path in map(local_path, uris):
        for folder in old:
            if path is not None and path.is_relative_to(folder):
                relative.append(path.relative_to(folder))
    if any((here / rel).is_dir() for rel in relative):
        return True
    return not any((folder / rel).is_dir() for rel in relative for folder in old)


def _folder(db: Path) -> Path:
    """The store's folder as locations name it (absolute, symbolic links kept)."""
    return Path(os.path.abspath(db)).parent


@contextlib.contextmanager
def _connect(db: Path) -> Iterator[sqlite3.Connection]:
    """One transaction on the store: committed when the block ends, rolled back on error."""
    if not db.is_file():
        raise FileNotFoundError(f"{db}: no MLflow SQLite store")
    con = sqlite3.connect(db, timeout=BUSY_TIMEOUT_S)
    try:
        with con:
            yield con
    finally:
        con.close()


def _columns(con: sqlite3.Connection) -> dict[str, set[str]]:
    tables = [row[0] for row in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: {row[1] for row in con.execute(f'PRAGMA table_info("{t}")')} for t in tables}


def _rewrite(con: sqlite3.Connection, table: str, column: str, folders: Sequence[Path],
             new: Path, dry_run: bool, where: tuple[str, str] | None = None) -> int:
    """Rows of ``table.column`` under a folder of ``folders`` (as a ``file://`` URI or a plain
    path) moved under ``new``; rows already under ``new`` are left (``new`` may lie inside an
    old folder). Prefixes match whole path components only."""
    changed = 0
    extra = f' AND "{where[0]}" = ?' if where else ""
    extra_args: tuple[str, ...] = (where[1],) if where else ()
    for folder in folders:
        for before, after in ((folder.as_uri(), new.as_uri()), (str(folder), str(new))):
            match = (f'("{column}" = ? OR substr("{column}", 1, ?) = ?) AND NOT '
                     f'("{column}" = ? OR substr("{column}", 1, ?) = ?){extra}')
            args = (before, len(before) + 1, before + "/", after, len(after) + 1, after + "/",
                    *extra_args)
            if dry_run:
                changed += con.execute(f'SELECT count(*) FROM "{table}" WHERE {match}',
                                       args).fetchone()[0]
                continue
            changed += con.execute(
                f'UPDATE "{table}" SET "{column}" = ? || substr("{column}", ?) WHERE {match}',
                (after, len(before) + 1, *args)).rowcount
    return changed
