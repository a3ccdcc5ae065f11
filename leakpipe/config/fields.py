"""Field helpers for the config dataclasses: numeric bounds stored as field metadata.

``num(ge=..., gt=..., le=..., lt=...)`` declares a numeric field; the bounds travel in the
field's metadata and are checked when a section is loaded (``leakpipe.config.loading``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

__all__ = ["num"]


def _range(*, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None) -> dict[str, float]:
    """Field metadata for numeric bounds, checked by the loader."""
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    return {k: v for k, v in bounds.items() if v is not None}


def num(default: Any = dataclasses.MISSING, **bounds: float) -> Any:
    """A numeric field with bounds (``ge``, ``gt``, ``le``, ``lt``)."""
    return field(default=default, metadata=_range(**bounds))
