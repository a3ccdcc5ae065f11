"""Where the repository root is, so outputs land in one place whatever the working directory.

DVC sets ``DVC_ROOT`` when it runs a stage (queued experiments run in temporary copies under
``.dvc/tmp/exps``); otherwise the root is found by walking up from the working directory, then
from this package, to the first folder that holds ``dvc.yaml``.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT_MARKERS = ("dvc.yaml", ".dvc")


def _find_up(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return folder
    return None


def repo_root() -> Path:
    """The project root: ``DVC_ROOT``, else the nearest folder with dvc.yaml."""
    env = os.environ.get("DVC_ROOT")
    if env:
        return Path(env).resolve()
    found = _find_up(Path.cwd().resolve()) or _find_up(Path(__file__).resolve().parent)
    return found if found is not None else Path.cwd().resolve()
