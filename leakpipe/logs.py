"""Logging set-up, called once by the entry point: plain ASCII, one line per event."""

from __future__ import annotations

import logging
import os
import warnings

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_QUIET = ("alembic", "mlflow", "urllib3", "git", "matplotlib", "numba", "h5py", "fsspec")


def setup_logging(verbose: bool = False) -> None:
    """Configure the root logger and silence chatty third-party loggers."""
    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format=_FORMAT, datefmt="%H:%M:%S", force=True)
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    # MLflow prints an emoji banner and tips at the end of each run unless told otherwise.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is imported
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    warnings.filterwarnings("ignore", category=FutureWarning, module="mlflow")
