"""`leakpipe export`: the detector's scoring network as ONNX, and its rules as JSON, for edge
devices that run no Python leakpipe.

The network is the segment scorer the MLflow model serves (``leakpipe.model.SegmentScorer``):
log-mel segments in, class probabilities plus the segment leak probability out, built around the
detector's exact inference form (``leakpipe.inference``), with a dynamic batch axis. What turns
segment outputs into a recording's decision (the feature config, the per-clip input
normalisation, the voting rule, the threshold, any calibration) is data, not graph: it goes to
a JSON file beside the model (``rules``) and into the model's metadata.

Modules: ``graph`` (torch -> ONNX bytes, checked with onnxruntime), ``rules`` (the JSON),
``stats_graph`` and ``fused_graph`` (a logger_stats detector's statistics model; a fused
detector's whole recording decision from its segments and statistics, each with its rules),
``stage`` (``run_export``: the command). Nothing is imported here: `leakpipe --help` must not
load torch.onnx.
"""
