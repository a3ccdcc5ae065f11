"""``run_export``: `leakpipe export --format onnx --model PATH_OR_URI --out DIR`.

Writes ``DIR/model.onnx`` (the scoring network, its rules in the metadata property
``leakpipe_rules``) and ``DIR/rules.json`` (the same rules); for a logger_stats detector the
statistics' model (``stats_graph``), for a fused one the whole recording's decision from its
segments and statistics (``fused_graph``). The graph is checked against
PyTorch with onnxruntime before anything is written; the pair is replaced together: the JSON
first, then the model is renamed into place, so a failure leaves the previous pair (or none).
"""

from __future__ import annotations

import logging
from pathlib import Path

from leakpipe.errors import DataError
from leakpipe.export.graph import OPSET, SEGMENT_DOC, checked_onnx, with_metadata
from leakpipe.export.rules import edge_rules, raw_detector
from leakpipe.files import file_sha256, json_text, write_atomic, write_text_atomic
from leakpipe.predict import resolve_model
from leakpipe.stats_detector import FusedDetector, StatsDetector, load_any_detector

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
    if isinstance(detector, StatsDetector):
        return _export_stats(detector, spec, path, out)
    if isinstance(detector, FusedDetector):
        return _export_fused(detector, spec, path, out)
    graph, diff = checked_onnx(detector, str(path))
    rules = edge_rules(detector, raw_detector(path), source=spec, sha256=file_sha256(path),
                       onnx_file=ONNX_FILE, max_diff=diff)
    model = _write_pair(out, graph, rules, SEGMENT_DOC)
    print(f"export: {out / ONNX_FILE} ({len(model) / 1024:.0f} KiB, ONNX opset {OPSET}, "
          f"largest |onnxruntime - torch| {diff:.1e}) and {out / RULES_FILE} (input_norm "
          f"{detector.input_norm}, rule {detector.voting.rule}, threshold "
          f"{detector.threshold:g})")
    return 0


def _export_stats(detector: StatsDetector, spec: str, path: Path, out: Path) -> int:
    """A logger_stats detector: its statistics -> probability graph and the measuring rules."""
    from leakpipe.export import stats_graph

    graph, diff = stats_graph.checked_onnx(detector, str(path))
    rules = stats_graph.stats_rules(detector, source=spec, sha256=file_sha256(path),
                                    onnx_file=ONNX_FILE, max_diff=diff)
    _write_pair(out, graph, rules, stats_graph.DOC)
    print(f"export: {out / ONNX_FILE} (logger_stats, {len(detector.net.names)} statistics, "
          f"ONNX opset {OPSET}, largest |onnxruntime - torch| {diff:.1e}) and "
          f"{out / RULES_FILE} (threshold {detector.threshold:g})")
    return 0


def _export_fused(detector: FusedDetector, spec: str, path: Path, out: Path) -> int:
    """A fused detector: one graph from a recording's segments and statistics to its stacked
    probability, and the rules that make its inputs."""
    from leakpipe.export import fused_graph

    graph, diff = fused_graph.checked_onnx(detector, str(path))
    rules = fused_graph.fused_rules(detector, source=spec, sha256=file_sha256(path),
                                    onnx_file=ONNX_FILE, max_diff=diff)
    _write_pair(out, graph, rules, fused_graph.DOC)
    print(f"export: {out / ONNX_FILE} (fused: segments and {len(detector.logger_stats.net.names)} "
          f"statistics, ONNX opset {OPSET}, largest |onnxruntime - torch| {diff:.1e}) and "
          f"{out / RULES_FILE} (threshold {detector.threshold:g})")
    return 0


def _write_pair(out: Path, graph: bytes, rules: dict[str, object], doc: str) -> bytes:
    """model.onnx (the rules in its metadata) and rules.json, replaced together; the model."""
    text = json_text(rules)
    model = with_metadata(graph, {RULES_PROP: text}, doc=doc)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / ONNX_FILE, lambda handle: handle.write(model),
                 before_replace=lambda _tmp, _path: write_text_atomic(out / RULES_FILE, text))
    return model
