"""The scoring network as ONNX bytes, and the check that onnxruntime computes what torch does.

Exported with torch's TorchScript-based exporter (``dynamo=False``): it needs no package beyond
``onnx`` and exports the small, static LeakCNN graph in well under a second, where the dynamo
exporter would add ``onnxscript`` and a ``torch.export`` trace. torch 2.13 marks it deprecated
with a ``DeprecationWarning`` on every call; that warning is silenced here, on purpose, because
the pinned torch still ships it (a torch upgrade that drops it fails the export tests).

The graph is ``SegmentScorer`` around the detector's LeakCNN as trained (2-D convolutions), in
eval mode: dropout is gone and batch normalisation uses its running statistics. Not leakpipe's
inference form (``leakpipe.inference``, 1-D convolutions for one-frame segments): its pairwise
max pool slices by a traced size, which hides the mel axis's length from the exporter (the
adaptive pool then cannot be exported), and onnxruntime runs the 2-D graph faster anyway
(benchmarks/perf/bench_export.py: 2.0x the 1-D graph on 2 CPU cores). The batch axis is
dynamic; the mel and frame axes are the detector's.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from leakpipe.detector import Detector
from leakpipe.errors import DataError, LeakpipeError
from leakpipe.model import SegmentScorer

OPSET = 17               # ai.onnx opset: ONNX Runtime >= 1.11 and most edge runtimes run it
INPUT_NAME = "segments"  # (batch, 1, n_mels, n_frames) float32 log-mel dB, input-normalised
OUTPUT_NAME = "probs"    # (batch, C + 1) float32: class softmax, then the leak probability
BATCH_AXIS = "batch"
TOLERANCE = 1e-4         # largest |onnxruntime - torch| accepted on the check segments
CHECK_SEGMENTS = 64      # random segments of the self-check (and two batch sizes, 1 and this)
CHECK_SEED = 0
CHECK_DB = (-40.0, 20.0)  # mean and spread of the check segments' log-mel values, dB


class ExportError(LeakpipeError):
    """The exported graph does not compute what the detector computes (nothing is written)."""


def scorer(detector: Detector) -> nn.Module:
    """The module that is exported: (B, 1, M, T) segments -> (B, C + 1) probabilities."""
    return SegmentScorer(detector.model.eval(), detector.leak_index,
                         detector.voting.prob_mode).eval()


def output_columns(detector: Detector) -> list[str]:
    """Names of the output's columns: the class names, then ``leak_prob``."""
    return [*detector.class_names, "leak_prob"]


def onnx_bytes(detector: Detector, where: str) -> bytes:
    """The detector's scoring network as a serialised ONNX model; ``where`` names the model
    in the one-line error of a network the exporter cannot express."""
    check_exportable(detector, where)
    return module_onnx(scorer(detector), detector.features.segment_shape[2:])


def check_exportable(detector: Detector, where: str) -> None:
    """A ``DataError`` naming ``where`` for a network the exporter cannot express."""
    if detector.model_cfg.tonal_median > 1:
        # torch.median over an unfolded axis has no ONNX operator and the exporter refuses it
        raise DataError(f"{where}: model.tonal_median = {detector.model_cfg.tonal_median}: the "
                        "running median over mel bands has no ONNX form; export supports "
                        "networks trained with tonal_median 0")


def module_onnx(module: nn.Module, mel_shape: tuple[int, int]) -> bytes:
    """Any segment scorer (B, 1, M, T) -> (B, K) as serialised ONNX, batch axis dynamic."""
    example = torch.zeros((2, 1, *mel_shape))                      # (2, 1, M, T)
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)   # see the module docstring
        torch.onnx.export(module, (example,), buffer, dynamo=False, opset_version=OPSET,
                          input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                          dynamic_axes={INPUT_NAME: {0: BATCH_AXIS},
                                        OUTPUT_NAME: {0: BATCH_AXIS}})
    return buffer.getvalue()


def cpu_session(model: bytes, threads: int | None = None) -> Any:
    """An onnxruntime CPU session of ``model`` (``threads``: intra-op threads, None = its
    default, one per physical core)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3        # errors only: its INFO lines are not for a user
    if threads is not None:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def run_onnx(model: bytes, segments: np.ndarray) -> np.ndarray:
    """(B, 1, M, T) segments -> (B, C + 1) through onnxruntime on the CPU."""
    session = cpu_session(model)
    return session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(segments, np.float32)})[0]


def check_segments(detector: Detector, n: int = CHECK_SEGMENTS) -> np.ndarray:
    """(n, 1, M, T) float32 random log-mel segments (seeded): the self-check's input."""
    mean, spread = CHECK_DB
    rng = np.random.default_rng(CHECK_SEED)
    shape = (n, 1, *detector.features.segment_shape[2:])
    return rng.normal(mean, spread, shape).astype(np.float32)


def max_difference(detector: Detector, model: bytes) -> float:
    """Largest |onnxruntime - torch| over every output of the check segments, run as one
    batch of ``CHECK_SEGMENTS`` and as a batch of one (the batch axis is dynamic)."""
    module = scorer(detector)
    segments = check_segments(detector)
    worst = 0.0
    for batch in (segments, segments[:1]):
        with torch.inference_mode():
            expected = module(torch.from_numpy(batch)).numpy()
        worst = max(worst, float(np.abs(run_onnx(model, batch) - expected).max()))
    return worst


def checked_onnx(detector: Detector, where: str) -> tuple[bytes, float]:
    """The ONNX bytes and their largest difference from torch; ``ExportError`` beyond
    ``TOLERANCE``."""
    model = onnx_bytes(detector, where)
    diff = max_difference(detector, model)
    if not diff <= TOLERANCE:
        raise ExportError(f"{where}: the ONNX graph differs from the PyTorch network by "
                          f"{diff:.3g} (> {TOLERANCE:g}) on {CHECK_SEGMENTS} check segments; "
                          "nothing written")
    return model, diff


SEGMENT_DOC = ("leakpipe segment scorer: (batch, 1, n_mels, n_frames) log-mel dB -> class "
               "probabilities then the leak probability; see metadata leakpipe_rules")


def with_metadata(model: bytes, props: dict[str, str], doc: str = SEGMENT_DOC) -> bytes:
    """``model`` with ``props`` as its metadata (``metadata_props``), e.g. the rules JSON, so
    the .onnx file alone still says how to use it."""
    import onnx

    proto = onnx.load_from_string(model)
    onnx.helper.set_model_props(proto, props)
    proto.doc_string = doc
    return proto.SerializeToString()
