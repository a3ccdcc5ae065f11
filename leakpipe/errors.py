"""Errors a user can fix; the CLI prints their one-line message and exits with ``exit_code``."""

from __future__ import annotations

from leakpipe.constants import EXIT_CONFIG, EXIT_DATA


class LeakpipeError(Exception):
    """Base of expected, user-facing failures (no traceback is shown for these)."""

    exit_code = 1


class ConfigError(LeakpipeError, ValueError):
    """A bad params file or value; the message is one line: ``<file>: <key>: <problem>``."""

    exit_code = EXIT_CONFIG


class DataError(LeakpipeError, ValueError):
    """Bad input data (recordings, manifests, HDF5 splits); the message names the file."""

    exit_code = EXIT_DATA
