"""The digest of the leakpipe package's source: what a resumable stage keys its saved partial
results on (crossval's finished folds, tune's Optuna study), so that other code never reuses them.

It sits low in the layers (it needs only the package's own location) because stages of
different layers share it: cv is above tune, and tune may not import cv.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import leakpipe

__all__ = ["package_digest"]


def package_digest() -> str:
    """SHA-256 over the leakpipe package's own source files (relative path and bytes, in path
    order): a resumable stage keys its saved partial results on it, besides its inputs and
    settings, so that results computed by other code are never reused. DVC re-runs a stage
    when a module of its import closure changes; the closure lies inside the package, so
    whenever DVC re-runs the stage for its code, this digest has changed too."""
    root = Path(leakpipe.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()
