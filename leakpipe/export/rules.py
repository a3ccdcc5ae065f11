"""The rules beside the exported network: everything that turns its outputs into a decision.

An edge device holding ``model.onnx`` still has to cut a recording into clips and segments,
compute the log-mel features, normalise each clip, run the network, vote and compare with the
threshold exactly as `leakpipe predict` does; this JSON says how (docs/export.md walks through
it). It names the feature config (every field, defaults included: the device has no
params.yaml), ``input_norm``, the voting rule and threshold, the calibration that turns the
rule's score into the reported leak probability (and the threshold on that scale), the class
names and the output's columns, the shortest usable recording, and the detector's test
figures for reference.

Keys of the detector file that this exporter does not know (ones a later evaluate adds) are
carried over as they are, converted to JSON values, so the rules never silently drop something
the detector decides with.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.export.graph import BATCH_AXIS, INPUT_NAME, OPSET, OUTPUT_NAME, output_columns

log = logging.getLogger(__name__)

RULES_FORMAT = "leakpipe.edge_rules"
RULES_VERSION = 1
# what the exporter reads itself (weights go to the graph; batch caps and memory margins are
# the scoring loop's business, not a device's); every other key of the file is carried over
KNOWN_KEYS = frozenset({"format", "version", "model", "model_config", "class_names",
                        "data_class_names", "binary", "features", "input_norm", "voting",
                        "threshold", "metrics", "batch_limits", "min_clip_fraction",
                        "calibration"})


def edge_rules(detector: Detector, raw: dict[str, Any], *, source: str, sha256: str,
               onnx_file: str, max_diff: float) -> dict[str, Any]:
    """The rules JSON of ``detector`` (``raw``: its file's dict, for keys beyond the known)."""
    f = detector.features
    rules: dict[str, Any] = {
        "format": RULES_FORMAT, "version": RULES_VERSION,
        "source": {"model": source, "sha256": sha256},
        "onnx": {"file": onnx_file, "opset": OPSET, "input": INPUT_NAME,
                 "input_shape": [BATCH_AXIS, 1, f.n_mels, f.n_frames], "output": OUTPUT_NAME,
                 "output_columns": output_columns(detector),
                 "leak_column": len(detector.class_names),
                 "max_abs_diff_vs_torch": max_diff},
        "features": dataclasses.asdict(f),
        "segment_shape": list(f.segment_shape),
        "input_norm": detector.input_norm,
        "voting": dataclasses.asdict(detector.voting),
        "threshold": float(detector.threshold),
        # the rule's score -> the reported leak probability; the identity for a detector file
        # written before evaluate fitted one (it loads so), so a device always finds the key
        "calibration": json_value(detector.calibration.to_dict(), f"{source}: calibration"),
        "prob_threshold": float(detector.prob_threshold),
        "class_names": list(detector.class_names),
        "binary": bool(detector.binary),
        "min_clip_fraction": detector.min_clip_fraction,
        "metrics": {k: json_value(v, f"{source}: metrics.{k}")
                    for k, v in detector.metrics.items()},
    }
    extra = sorted(set(raw) - KNOWN_KEYS)
    for key in extra:
        if key in rules:
            raise DataError(f"{source}: detector key {key!r} clashes with a rules key")
        rules[key] = json_value(raw[key], f"{source}: {key}")
    if extra:
        log.info("export: carried over from the detector file: %s", ", ".join(extra))
    return rules


def json_value(value: Any, key: str) -> Any:
    """``value`` as JSON: tensors and arrays as (nested) lists, numpy scalars as numbers,
    tuples as lists; anything else that JSON cannot hold is a ``DataError`` naming ``key``
    (the file and the key, e.g. ``models/detector.pt: calibration.table``)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray | np.generic):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): json_value(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)          # strict JSON has no NaN / inf; "nan", "inf" are explicit
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise DataError(f"{key}: a {type(value).__name__} has no JSON form")


def raw_detector(path: Path) -> dict[str, Any]:
    """The detector file's dict as stored (``load_detector`` has checked it already)."""
    return torch.load(Path(path), map_location="cpu", weights_only=True)
