"""Edge export throughput: the exported ONNX segment scorer under onnxruntime vs PyTorch's
inference form (what leakpipe itself scores with), on the CPU, measured in one run.

A detector of the default size (params.yaml's `model`, the `build` features: 64 mels x 1 frame,
every class of the data as `train.binary: false` gives; random weights: what is measured does
not depend on them) scores the same batches of whole clips in every mode, as many segments per
pass as leakpipe's CPU cap allows (`evaluate.cpu_max_batch_segments`, whole clips):

1. pytorch_inference_form: ``SegmentScorer`` around ``leakpipe.inference``'s form (1-D
   convolutions), under ``torch.inference_mode``: the same outputs as the graph;
2. onnxruntime: ``leakpipe export``'s graph (``leakpipe.export.graph.onnx_bytes``: the 2-D
   LeakCNN) in an onnxruntime CPU session;
3. onnxruntime_inference_form: the 1-D inference form exported the same way (it exports at
   the default size only): why `leakpipe export` ships the 2-D graph;
4. pytorch_leakcnn: the 2-D LeakCNN in PyTorch, for reference.

torch and onnxruntime get the same thread count (torch's, 2 on the 2-core machine). Modes are
interleaved in rounds after one warm-up each; segments/s of the median and of the best round
are reported (the machine may be shared: interference only adds time), and the largest
|onnxruntime - PyTorch| over every output of the batches.

    python benchmarks/perf/bench_export.py [--batches 20] [--rounds 5] \
        [--out benchmarks/results/export.json]

Figures: docs/export.md, docs/results/performance.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import torch
from bench_evaluate import rounds  # interleaved timing rounds; run as a script from benchmarks/

from leakpipe.config import load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.schema import task_classes
from leakpipe.decision.voting import VotingConfig
from leakpipe.detector import Detector
from leakpipe.export.graph import INPUT_NAME, OUTPUT_NAME, cpu_session, module_onnx, onnx_bytes
from leakpipe.model import SegmentScorer, create_model

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
SEED = 0


def default_detector(params: Path) -> Detector:
    """A random-weight detector of the params' model size and features."""
    binary = load_section(params, "train").binary
    classes = task_classes(KNOWN_CLASSES, binary)
    torch.manual_seed(SEED)
    model_cfg = load_section(params, "model")
    decision = load_section(params, "decision")
    return Detector(model=create_model(model_cfg, len(classes)).eval(), model_cfg=model_cfg,
                    class_names=classes, data_class_names=KNOWN_CLASSES, binary=binary,
                    features=load_section(params, "build").features,
                    voting=VotingConfig(prob_mode=decision.prob_mode, rule=decision.rule,
                                        vote_fraction=decision.vote_fraction),
                    threshold=0.5, metrics={})


def make_batches(detector: Detector, cap: int, n_batches: int) -> list[np.ndarray]:
    """``n_batches`` batches of whole clips, (B, 1, M, T) float32 log-mel-like dB."""
    n_long, n_short, n_mels, n_frames = detector.features.segment_shape
    per_clip = n_long * n_short
    clips = max(1, cap // per_clip)
    rng = np.random.default_rng(SEED)
    return [rng.normal(-40.0, 10.0, (clips * per_clip, 1, n_mels, n_frames)).astype(np.float32)
            for _ in range(n_batches)]


def torch_mode(module: torch.nn.Module, batches: list[np.ndarray]) -> Callable[[], float]:
    tensors = [torch.from_numpy(b) for b in batches]

    def run() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for x in tensors:
                module(x)
        return time.perf_counter() - start
    return run


def onnx_mode(model: bytes, batches: list[np.ndarray], threads: int) -> Callable[[], float]:
    session = cpu_session(model, threads)

    def run() -> float:
        start = time.perf_counter()
        for x in batches:
            session.run([OUTPUT_NAME], {INPUT_NAME: x})
        return time.perf_counter() - start
    return run


def largest_difference(module: torch.nn.Module, model: bytes,
                       batches: list[np.ndarray]) -> float:
    session = cpu_session(model)
    worst = 0.0
    with torch.inference_mode():
        for x in batches:
            got = session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
            worst = max(worst, float(np.abs(got - module(torch.from_numpy(x)).numpy()).max()))
    return worst


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20, help="batches per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--out", type=Path,
                        default=REPO / "benchmarks" / "results" / "export.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    params = REPO / "params.yaml"
    detector = default_detector(params)
    cap = load_section(params, "evaluate").cpu_max_batch_segments
    batches = make_batches(detector, cap, args.batches)
    threads = torch.get_num_threads()
    fast = SegmentScorer(detector.inference_model(), detector.leak_index,
                         detector.voting.prob_mode).eval()
    plain = SegmentScorer(detector.model, detector.leak_index, detector.voting.prob_mode).eval()
    graph = onnx_bytes(detector, "bench")
    graph_fast = module_onnx(fast, detector.features.segment_shape[2:])
    load_start = os.getloadavg()[0]
    times = rounds({"pytorch_inference_form": torch_mode(fast, batches),
                    "onnxruntime": onnx_mode(graph, batches, threads),
                    "onnxruntime_inference_form": onnx_mode(graph_fast, batches, threads),
                    "pytorch_leakcnn": torch_mode(plain, batches)}, args.rounds)
    segments = sum(len(b) for b in batches)
    modes = {name: {"segments_per_s": round(segments / statistics.median(t), 1),
                    "best_segments_per_s": round(segments / min(t), 1),
                    "all_s": [round(v, 4) for v in t]} for name, t in times.items()}
    result = {
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__,
                    "onnxruntime": onnxruntime.__version__, "python": platform.python_version(),
                    "threads": threads, "processor": cpu_model(),
                    "load_avg_1min_at_start": load_start,
                    "load_avg_1min_at_end": os.getloadavg()[0]},
        "model": {"classes": len(detector.class_names),
                  "segment_shape": list(detector.features.segment_shape),
                  "level_input": detector.model_cfg.level_input,
                  "onnx_bytes": len(graph)},
        "batches": {"count": len(batches), "segments_per_batch": len(batches[0]),
                    "segments_per_round": segments},
        "max_abs_diff_onnx_vs_torch": largest_difference(fast, graph, batches),
        "modes": modes,
        "ratios": {kind: {
            "onnxruntime_vs_pytorch_inference_form":
                round(modes["onnxruntime"][kind] / modes["pytorch_inference_form"][kind], 3),
            "onnxruntime_2d_vs_1d_graph":
                round(modes["onnxruntime"][kind] / modes["onnxruntime_inference_form"][kind], 3),
        } for kind in ("segments_per_s", "best_segments_per_s")},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"modes": {k: v["segments_per_s"] for k, v in modes.items()},
                      "ratios": result["ratios"]}, indent=2))


if __name__ == "__main__":
    main()
