"""Database URLs as people write them -> the SQLAlchemy URLs of the drivers leakpipe pins.

SQLAlchemy reads ``postgresql://`` as psycopg2, which is not installed; psql, Optuna's and
MLflow's docs all write the URL without a driver. leakpipe pins psycopg 3, so a PostgreSQL URL
that names no driver gets it here, for the Optuna storage and the MLflow store alike.
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
