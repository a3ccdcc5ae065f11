"""How `leakpipe predict` scores a CNN detector's recordings: one row per recording, a batch of
recordings at a time.

Each recording is read like `build` reads it (``leakpipe.predict.inputs``: any WAV / FLAC /
OGG, resampled to the model's rate, with the feature config stored in the detector file, so
features always match training), covered by clips of the model's clip length (evenly spaced
from start to end, as build places its clips; a recording shorter than one clip is
zero-padded), and scored through the one scoring path (``leakpipe.scoring``). All long segments
of a recording are then voted on together with the detector's rule and threshold into its row
(``leakpipe.predict.rows.result_row``); one that cannot be read gets an error row, one whose
signal is refused an unusable row.

Recordings are scored in batches of many recordings up to a segment budget
(``predict.rules.batch_budget``), so the device sees full batches whatever the recordings'
lengths. A recording is decoded block by block and turned into features a batch's worth of
clips at a time (``prepare``), so a long one is scored in parts and only its probabilities are
kept until its row is written: memory does not grow with its length beyond those (clips x long
x short float32 values).

``score_recordings`` gives the rows of files or of in-memory waveforms (`leakpipe predict` writes
them, the served detector returns them); ``score_segments`` scores an array of clips (explain,
the sim-to-real check); ``clip_scoring`` is the same as one function of a recording's clips (a
fused detector's CNN part).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from leakpipe.audio.opening import AudioSource
from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.config import QualityConfig
from leakpipe.decision.domain import band_profile
from leakpipe.detector import Detector
from leakpipe.predict.inputs import prepare_all
from leakpipe.predict.rows import Failed, Prepared, error_row, result_row
from leakpipe.predict.rules import ScoringRules, batch_budget
from leakpipe.runtime import Runtime
from leakpipe.scoring.batching import array_batches
from leakpipe.scoring.score import score_batches


@dataclass(frozen=True)
class ClipScoring:
    """How predict scores a CNN detector's clips."""

    score: Callable[[np.ndarray], np.ndarray]   # (clips, L, S, M, T) -> (clips, L, S) probs
    max_clips: int                              # clips per call: about one batch
    min_fraction: float                         # shortest usable recording, share of a clip


def score_segments(detector: Detector, model: nn.Module, mel: np.ndarray, runtime: Runtime,
                   budget: int) -> np.ndarray:
    """(clips, L, S, M, T) of many recordings -> (clips, L, S) leak probabilities.

    ``model`` is the detector's network on the runtime's device (its inference form, usually);
    each clip is normalised by the detector's ``input_norm``, as in training, and scored by
    the one scoring path in batches of whole clips of about ``budget`` segments.
    """
    batches = array_batches(mel, budget, detector.input_norm)
    return score_batches(model, batches, segments=tuple(mel.shape[1:3]),
                         leak_index=detector.leak_index, prob_mode=detector.voting.prob_mode,
                         runtime=runtime).seg_probs


def clip_scoring(detector: Detector, rules: ScoringRules, runtime: Runtime,
                 max_batch_segments: int | None = None) -> ClipScoring:
    """``score_segments`` of ``detector``'s inference form on the runtime's device as one
    function of a recording's clips (what a fused detector's CNN part is scored with)."""
    model = detector.inference_model().to(runtime.device)
    budget = batch_budget(detector, rules, runtime, max_batch_segments)
    f = detector.features
    return ClipScoring(lambda mel: score_segments(detector, model, mel, runtime, budget),
                       max(1, budget // (f.n_long * f.n_short)), rules.min_clip_fraction)


def score_recordings(recordings: Iterable[Path | AudioSource], detector: Detector,
                     model: nn.Module, *, runtime: Runtime, budget: int, min_fraction: float,
                     quality: QualityConfig = DEAD_ONLY) -> Iterator[list[dict[str, Any]]]:
    """The rows of ``recordings`` (files or in-memory sources), in order, a batch at a time.

    ``model`` is the detector's network on the runtime's device and ``budget`` the segments
    per forward pass (``batch_budget``); ``quality`` the signal checks (the rules'). A
    recording that cannot be read gets an error row, one whose signal is refused an unusable
    row. `leakpipe predict` writes these rows to its CSV; the served detector returns them.
    """
    f = detector.features
    max_clips = max(1, budget // (f.n_long * f.n_short))       # a part is about one batch
    rows = _RowAssembler(detector)
    items = prepare_all(recordings, detector, min_fraction, max_clips, quality)
    for group in _groups(items, budget):
        scored = _score_group(group, detector, model, runtime, budget)
        yield [row for item, probs in scored if (row := rows.add(item, probs)) is not None]


def _groups(items: Iterator[Prepared | Failed],
            budget: int) -> Iterator[list[Prepared | Failed]]:
    """Consecutive recordings (or parts of one) holding about ``budget`` segments together."""
    group: list[Prepared | Failed] = []
    segments = 0
    for item in items:
        group.append(item)
        segments += item.segments if isinstance(item, Prepared) else 0
        if segments >= budget:
            yield group
            group, segments = [], 0
    if group:
        yield group


def _score_group(group: list[Prepared | Failed], detector: Detector, model: nn.Module,
                 runtime: Runtime,
                 budget: int) -> list[tuple[Prepared | Failed, np.ndarray | None]]:
    """Each item of ``group`` with its (clips, L, S) probabilities (None for a failure)."""
    ready = [item for item in group if isinstance(item, Prepared)]
    probs: list[np.ndarray] = []
    if ready:
        mel = np.concatenate([p.mel for p in ready])                  # (clips, L, S, M, T)
        all_probs = score_segments(detector, model, mel, runtime, budget)  # (clips, L, S)
        probs = np.split(all_probs, np.cumsum([len(p.mel) for p in ready])[:-1])
    scored = iter(probs)
    return [(item, next(scored) if isinstance(item, Prepared) else None) for item in group]


class _RowAssembler:
    """One row per recording from its scored parts, which may span several batches.

    Of a part only its clip starts, probabilities (clips x L x S float32) and band profile
    (M,) are kept, not its features: those are what would grow with the length of a recording.
    """

    def __init__(self, detector: Detector) -> None:
        self.detector = detector
        self.starts: list[np.ndarray] = []  # (clips,) per part of the recording in progress
        self.probs: list[np.ndarray] = []   # (clips, L, S) per part
        self.profiles: list[np.ndarray] = []  # (M,) per part, weighted by its clips below

    def add(self, item: Prepared | Failed, probs: np.ndarray | None) -> dict[str, Any] | None:
        """The recording's row once ``item`` finishes it (its last part, or its failure)."""
        if isinstance(item, Failed):
            self.starts, self.probs, self.profiles = [], [], []  # a failed recording's parts
            return error_row(item, self.detector)
        assert probs is not None
        self.starts.append(item.starts_s)
        self.probs.append(probs)
        self.profiles.append(band_profile(item.mel) * len(item.mel))
        if not item.last:
            return None
        starts = np.concatenate(self.starts)
        row = result_row(item, starts, np.concatenate(self.probs), self.detector,
                         np.sum(self.profiles, axis=0) / len(starts))
        self.starts, self.probs, self.profiles = [], [], []
        return row


__all__ = ["ClipScoring", "clip_scoring", "score_recordings", "score_segments"]
