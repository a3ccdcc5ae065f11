"""Metric names and the metrics-file layout shared by every stage.

Names are hierarchical (``val/clip_f1``, ``test/clip_roc_auc``) in MLflow and in the plot
files; the DVC metrics files hold the same names nested at their slashes, so ``dvc metrics
show`` prints ``test.clip_f1``. Non-finite values become null (strict JSON).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

SEP = "/"
# Names of timing and resource figures (they differ run to run). MLflow's run page orders its
# chart sections by name: a prefix after "val" puts the learning curves (train/*, val/*) first.
TIMING_PREFIX = "vitals/"
# Clip-level figures were once named ``file_*`` (a "file" was one HDF5 row: a clip), beside the
# recording-level ones; a name read from an older params file, model file or metrics file is
# translated, so nothing a user wrote stops working.
_LEGACY_CLIP = re.compile(r"(^|/)file_(?=(f1|roc_auc|recall|accuracy|precision|specificity|"
                          r"pr_auc|support|tp|fp|tn|fn|threshold|balanced_accuracy)(_ci_low|"
                          r"_ci_high)?$)")


def current_name(name: str) -> str:
    """``val/file_f1`` (the old name of a clip figure) -> ``val/clip_f1``; others unchanged."""
    return _LEGACY_CLIP.sub(r"\1clip_", name)


def current_names(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A stored metrics mapping with every old clip-figure name translated (``current_name``)."""
    return {current_name(k): v for k, v in metrics.items()}


def nest(flat: Mapping[str, Any], sep: str = SEP) -> dict[str, Any]:
    """{'val/clip_f1': 1.0} -> {'val': {'clip_f1': 1.0}} (DVC shows it as val.clip_f1)."""
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
