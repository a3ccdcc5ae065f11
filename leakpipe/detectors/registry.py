"""The registry: a detector file's ``kind`` -> the ``DetectorKind`` that implements it.

``register`` adds a kind (a plugin's, a test's); ``kind_named`` / ``kind_of`` find it: a
registered kind first, else a built-in one (``leakpipe.detectors.kinds.BUILT_IN``);
``load_any_detector`` reads a detector file of any kind.

The built-in kinds' modules sit at the top of the layers (a kind wires its pieces of every
layer), this module low (every surface calls it): it imports them inside ``built_in``, the
one import in the package that points up (tests/test_layers.py names it; the stages' code
digests follow it, so a change to a kind's code re-runs every stage that loads detectors).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from leakpipe.detector import CNN_KIND, read_detector_file
from leakpipe.detectors.interface import DetectorKind, LoadedDetector
from leakpipe.errors import DataError

_NAME = re.compile(r"[a-z][a-z0-9_]*")          # a kind's name: a file field and a column value
_KINDS: dict[str, DetectorKind] = {}


def built_in() -> dict[str, DetectorKind]:
    """The kinds leakpipe ships: name -> kind."""
    from leakpipe.detectors.kinds import BUILT_IN  # the one upward import (see above)

    return dict(BUILT_IN)


def register(kind: DetectorKind) -> DetectorKind:
    """Make ``kind`` the implementation of detector files of kind ``kind.name``; returns it.
    Registering a name again replaces the earlier kind (a plugin may override a built-in)."""
    if not isinstance(kind.name, str) or not _NAME.fullmatch(kind.name):
        raise ValueError(f"a detector kind's name must match {_NAME.pattern}: {kind.name!r}")
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Forget the registered kind ``name`` (a built-in kind of that name is found again)."""
    _KINDS.pop(name, None)


def kind_named(name: str) -> DetectorKind:
    """The kind ``name``: a registered one, else a built-in one; a ``DataError`` naming the
    known kinds otherwise."""
    kind = _KINDS.get(name) or built_in().get(name)
    if kind is None:
        raise DataError(f"detector kind {name!r} is not one this leakpipe knows (kinds: "
                        f"{registered()})")
    return kind


def kind_of(detector: LoadedDetector) -> DetectorKind:
    """The kind of a loaded detector."""
    return kind_named(detector.kind)


def registered() -> list[str]:
    """Every kind's name: the built-in ones and those registered since."""
    return sorted({*built_in(), *_KINDS})


def load_any_detector(path: Path) -> Any:
    """The detector of any kind in ``path`` (a file without a ``kind`` is a CNN detector); an
    unreadable file or an unknown kind is one ``DataError`` naming it."""
    raw = read_detector_file(Path(path))
    name = raw.get("kind", CNN_KIND)
    try:
        kind = kind_named(name)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    return kind.load(raw, Path(path))


__all__ = ["built_in", "kind_named", "kind_of", "load_any_detector", "register", "registered",
           "unregister"]
