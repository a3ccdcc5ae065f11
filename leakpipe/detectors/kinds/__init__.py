"""The built-in detector kinds, one module each: ``cnn``, ``logger_stats``, ``fused``
(``BUILT_IN``, which ``leakpipe.detectors.registry`` serves). Heavy pieces (a kind's ONNX
graph, its fitting in `ship`) are imported inside the method that needs them, so that loading
a kind to predict with never loads the trainer."""

from leakpipe.detectors.interface import DetectorKind
from leakpipe.detectors.kinds.cnn import CnnKind
from leakpipe.detectors.kinds.fused import FusedKind
from leakpipe.detectors.kinds.logger_stats import LoggerStatsKind

BUILT_IN: dict[str, DetectorKind] = {k.name: k for k in (CnnKind(), LoggerStatsKind(),
                                                         FusedKind())}

__all__ = ["BUILT_IN", "CnnKind", "FusedKind", "LoggerStatsKind"]
