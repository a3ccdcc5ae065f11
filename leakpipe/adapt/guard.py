"""The guard step of a round: is it accepted, or rejected and adaptation stopped?

``rejection`` compares the round's val F1 (and, with ``adapt.check_guard``, the labelled
field check set's F1) with the seed detector's (round 0's): more than ``adapt.tolerance``
below it, or not a number where the seed's is, rejects the round. Always the seed's, never the
previous accepted round's: against the previous round, rounds that each lose a little could
together lose any amount. Pure: the figures in, the reason out ("" to accept).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def rejection(r: int, seed: Mapping[str, Any], val_f1: float, check_f1: float | None, *,
              tolerance: float, check_guard: bool, standing: int, unit: str = "clip") -> str:
    """Why round ``r`` is rejected against the ``seed`` round's entry (round 0), or "".

    A figure more than ``tolerance`` below the seed's, or not a number where the seed's is
    (the worst score, as NaN is to early stopping), rejects the round; a figure the seed
    lacks (no check set) guards nothing. ``standing`` is the round whose detector stands."""
    for name, key, now, guard in (("val", "val", val_f1, True),
                                  ("field check set", "check", check_f1, check_guard)):
        before = (seed.get(key) or {}).get("f1")
        if not guard or now is None or before is None or not math.isfinite(before):
            continue
        if math.isfinite(now) and now >= before - tolerance:
            continue
        worse = (f"{now:.4f} is more than {tolerance:g} below" if math.isfinite(now)
                 else "is not a number, against")
        return (f"round {r} rejected: {name} {unit} F1 {worse} the seed's {before:.4f}; "
                f"round {standing}'s detector stands")
    return ""
