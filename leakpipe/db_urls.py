"""Database URLs as people write them -> the SQLAlchemy URLs of the drivers leakpipe pins, and
the form of a URL that may be shown.

SQLAlchemy reads ``postgresql://`` as psycopg2, which is not installed; psql, Optuna's and
MLflow's docs all write the URL without a driver. leakpipe pins psycopg 3, so a PostgreSQL URL
that names no driver gets it here, for the Optuna storage and the MLflow store alike. A URL
with credentials (``postgresql://user:secret@host/db``) is shown only as ``redacted`` writes
it, in logs, error messages and MLflow tags alike: those are read by people and stored.
"""

from __future__ import annotations

POSTGRES_SCHEMES = ("postgresql", "postgres")
POSTGRES_DRIVER = "postgresql+psycopg"


def with_driver(url: str) -> str:
    """``postgresql://u@h/db`` -> ``postgresql+psycopg://u@h/db``; any other URL unchanged."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in POSTGRES_SCHEMES:
        return f"{POSTGRES_DRIVER}://{rest}"
    return url


def redacted(url: str) -> str:
    """``scheme://user:secret@host/db`` -> ``scheme://***@host/db``; a URL without credentials
    (a path, ``sqlite:////a@b/x.db``, ``http://host:5000``) unchanged. Everything up to the last
    ``@`` goes, so a secret holding an unescaped ``@`` or ``/`` is not shown either."""
    scheme, sep, rest = url.partition("://")
    if not sep or rest.startswith("/") or "@" not in rest:    # no host part: a path
        return url
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
