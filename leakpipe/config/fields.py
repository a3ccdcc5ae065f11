"""Field helpers for the config dataclasses: numeric bounds stored as field metadata.

``num(ge=..., gt=..., le=..., lt=...)`` declares a numeric field; the bounds travel in the
field's metadata and are checked when a section is loaded (``leakpipe.config.loading``).

Every float the loader reads must be finite (``.inf`` / ``.nan`` in YAML are refused), the
entries of lists and mappings included: a NaN compares false with every bound, so it would
switch a range check off, and an infinite learning rate fails only inside training, after DVC
has deleted the stage's outputs. A key whose meaning needs a non-finite value says so with
``num(finite=False)`` and documents what the value means in its params.yaml comment.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

__all__ = ["NON_FINITE_OK", "num"]

NON_FINITE_OK = "non_finite_ok"  # metadata flag: this key may be .inf / .nan (num(finite=False))


def _range(*, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None) -> dict[str, Any]:
    """Field metadata for numeric bounds, checked by the loader."""
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    return {k: v for k, v in bounds.items() if v is not None}


def num(default: Any = dataclasses.MISSING, *, finite: bool = True, **bounds: float) -> Any:
    """A numeric field with bounds (``ge``, ``gt``, ``le``, ``lt``); ``finite=False`` lets it
    (and the entries of a list field) take ``.inf`` / ``.nan``."""
    metadata = _range(**bounds)
    if not finite:
        metadata[NON_FINITE_OK] = True
    return field(default=default, metadata=metadata)
