"""The CNN's recording score, in one place: the mean of a recording's clips' rule scores.

A CNN detector scores each clip of a split by its rule (its probability mode, rule and vote
fraction; ``decision.voting.file_scores``, in float64: a fused detector takes its logit), and a
recording, the unit a utility acts on, gets the mean of its clips' scores. This is the CNN's
recording score of `ship` (the `fused` kind's CNN part, ``leakpipe.ship.fused_evaluation``) and
of `promote` (``promotion_scoring``: a `cnn` detector's verdicts and a `fused` one's CNN part),
so a fused detector is stacked on the same number in both. The split's clips are scored through
the project's scoring path (``scoring.score_batches`` over its file-order batches).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leakpipe.decision.voting import file_scores
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.runtime import Runtime
from leakpipe.scoring.batching import BatchLimits, open_batches
from leakpipe.scoring.score import score_batches


def cnn_recording_scores(cnn: Detector, path: Path, clip_recording: np.ndarray, n: int, *,
                         placement: str, limits: BatchLimits, runtime: Runtime,
                         progress: bool = False, desc: str = "score") -> np.ndarray:
    """(R,) the CNN's score of each of the ``n`` recordings of the split ``path``, whose
    (F,) ``clip_recording`` gives each clip's (row's) recording index."""
    batches = open_batches(path, placement, cnn.model_cfg, runtime.device, limits, cnn.binary,
                           cnn.input_norm)
    info = batches.info
    scores = score_batches(cnn.inference_model().to(runtime.device), batches,
                           segments=tuple(info.segment_shape[:2]), leak_index=info.leak_label,
                           prob_mode=cnn.voting.prob_mode, runtime=runtime, progress=progress,
                           desc=desc, total=len(batches))
    if scores.n_files != len(clip_recording):
        raise DataError(f"{path}: {scores.n_files} clips scored, {len(clip_recording)} in its "
                        "recordings' table")
    clip = file_scores(scores.seg_probs.astype(np.float64), cnn.voting.rule,
                       cnn.voting.vote_fraction)                                   # (F,)
    sums = np.bincount(clip_recording, weights=clip, minlength=n)                  # (R,)
    return sums / np.maximum(np.bincount(clip_recording, minlength=n), 1)


__all__ = ["cnn_recording_scores"]
