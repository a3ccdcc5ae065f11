"""``run_export``: `leakpipe export --format onnx --model PATH_OR_URI --out DIR`.

Writes ``DIR/model.onnx`` (the scoring network, its rules in the metadata property
``leakpipe_rules``) and ``DIR/rules.json`` (the same rules), both from the detector's kind
(``DetectorKind.export``): for a cnn detector the segment network (``graph``, ``rules``), for a
logger_stats one the statistics' model (``stats_graph``), for a fused one the whole recording's
decision from its segments and statistics (``fused_graph``). The graph is checked against
PyTorch with onnxruntime before anything is written; the pair is replaced together: the JSON
first, then the model is renamed into place, so a failure leaves the previous pair (or none).
"""

from __future__ import annotations

import logging
from pathlib import Path

from leakpipe.detectors.registry import kind_of, load_any_detector
from leakpipe.errors import DataError
from leakpipe.export.graph import OPSET, with_metadata
from leakpipe.files import json_text, write_atomic, write_text_atomic
from leakpipe.predict.run import resolve_model

log = logging.getLogger(__name__)

FORMATS = ("onnx",)
ONNX_FILE = "model.onnx"
RULES_FILE = "rules.json"
RULES_PROP = "leakpipe_rules"   # the ONNX metadata key holding the rules JSON


def run_export(spec: str, out: Path, fmt: str = "onnx") -> int:
    """Export the detector ``spec`` (a file or an MLflow model URI) into the folder ``out``."""
    if fmt not in FORMATS:
        raise DataError(f"--format: {fmt!r} is not one of {list(FORMATS)}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a folder (--out names a folder)")
    path = resolve_model(spec)
    detector = load_any_detector(path)
    exported = kind_of(detector).export(detector, spec, path)
    model = _write_pair(out, exported.graph, exported.rules, exported.doc)
    print(f"export: {out / ONNX_FILE} ({exported.what}, {len(model) / 1024:.0f} KiB, ONNX opset "
          f"{OPSET}, largest |onnxruntime - torch| {exported.max_diff:.1e}) and "
          f"{out / RULES_FILE} ({exported.rules_what})")
    return 0


def _write_pair(out: Path, graph: bytes, rules: dict[str, object], doc: str) -> bytes:
    """model.onnx (the rules in its metadata) and rules.json, replaced together; the model."""
    text = json_text(rules)
    model = with_metadata(graph, {RULES_PROP: text}, doc=doc)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / ONNX_FILE, lambda handle: handle.write(model),
                 before_replace=lambda _tmp, _path: write_text_atomic(out / RULES_FILE, text))
    return model
