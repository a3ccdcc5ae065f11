"""Metric names and the metrics-file layout shared by every stage.

Names are hierarchical (``val/file_f1``, ``test/file_roc_auc``) in MLflow and in the plot
files; the DVC metrics files hold the same names nested at their slashes, so ``dvc metrics
show`` prints ``test.file_f1``. Non-finite values become null (strict JSON).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SEP = "/"
# Names of timing and resource figures (they differ run to run). MLflow's run page orders its
# chart sections by name: a prefix after "val" puts the learning curves (train/*, val/*) first.
TIMING_PREFIX = "vitals/"


def nest(flat: Mapping[str, Any], sep: str = SEP) -> dict[str, Any]:
    """{'val/file_f1': 1.0} -> {'val': {'file_f1': 1.0}} (DVC shows it as val.file_f1)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(sep)
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def json_safe(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """NaN / inf -> null (strict JSON); everything else unchanged."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in metrics.items()}
