"""Field recordings: read once into features, scored by every round's network.

The pool (unlabelled) and the optional check set (labelled) are read exactly as `leakpipe
predict` reads a recording (``predict.inputs.prepare``: resampled to the detector's rate, covered by
clips, two-stage log-mel with the detector's feature config), so the features match what the
deployed detector would see. They are kept in memory (about 49 MB per hour of audio at the
default features) and scored through the one scoring path (``score_batches``), then every
recording's long segments vote with the detector's rule, as in predict and evaluate.
``domain_summary`` tells how many of them the detector's domain check (predict's ``domain``
column) calls ``in``, ``shifted`` or ``unknown``, and why each shifted one is.
"""

from __future__ import annotations

import csv
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from leakpipe.audio.clips import AudioError
from leakpipe.constants import LEAK_CLASS
from leakpipe.data.manifest import discover
from leakpipe.decision.domain import SHIFTED, assess, band_profile
from leakpipe.decision.domain_set import set_check
from leakpipe.decision.voting import file_scores, long_segment_probs
from leakpipe.detector import Detector, Network
from leakpipe.errors import DataError
from leakpipe.features.mel import band_centers_hz
from leakpipe.predict.inputs import find_recordings, prepare
from leakpipe.runtime import Runtime
from leakpipe.scoring.batching import array_batches
from leakpipe.scoring.score import score_batches

log = logging.getLogger(__name__)

MAX_CLIPS_PER_PART = 256     # clips turned into features at a time while reading


@dataclass(frozen=True)
class FieldSet:
    """Recordings in features: ``keys`` (paths as given, relative to the source), one
    (clips, L, S, M, T) float32 array each, and the 0/1 truth of a labelled set."""

    keys: tuple[str, ...]
    mel: tuple[np.ndarray, ...]
    truth: np.ndarray | None = None          # (R,) 1 = LEAK; None for the unlabelled pool
    failed: tuple[str, ...] = ()             # "path: reason" of each unreadable recording

    def __len__(self) -> int:
        return len(self.keys)

    def subset(self, keys: tuple[str, ...]) -> FieldSet:
        """These recordings only (``keys`` in this set's order), the others counted failed."""
        wanted = set(keys)
        keep = [i for i, k in enumerate(self.keys) if k in wanted]
        dropped = tuple(f"{k}: not usable by every part" for k in self.keys if k not in wanted)
        return FieldSet(tuple(self.keys[i] for i in keep), tuple(self.mel[i] for i in keep),
                        self.truth[keep] if self.truth is not None else None,
                        self.failed + dropped)


@dataclass(frozen=True)
class FieldScores:
    """One network's view of a ``FieldSet`` under one rule."""

    scores: np.ndarray                 # (R,) rule score: LEAK <=> score >= threshold
    long_probs: list[np.ndarray]       # R arrays (n_long of that recording,)
    class_probs: np.ndarray            # (R, C) mean class softmax over the recording's clips
    seg_probs: tuple[np.ndarray, ...] = ()   # R arrays (clips, L, S); () where not kept


def pool_recordings(source: Path) -> list[tuple[str, Path]]:
    """(key, path) of the unlabelled recordings: a folder (searched for audio files) or a CSV
    whose ``path`` column names them relative to the CSV's folder."""
    source = Path(source)
    if source.is_file():
        with source.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if "path" not in (reader.fieldnames or []):
                raise DataError(f"{source}: adapt.source CSV has no 'path' column")
            rels = [row["path"].strip() for row in reader if (row.get("path") or "").strip()]
        return [(rel, source.parent / rel) for rel in rels]
    if not source.is_dir():
        raise DataError(f"{source}: adapt.source is neither a folder nor a CSV file")
    found = find_recordings([source])
    return [(p.relative_to(source).as_posix(), p) for p in found]


def check_recordings(source: Path) -> list[tuple[str, Path, int]]:
    """(key, path, 1 = LEAK) of a labelled set in any layout build reads."""
    return [(r.recording_id, r.path, int(r.label == LEAK_CLASS)) for r in discover(Path(source))]


def read_truth(path: Path) -> dict[str, int]:
    """The pool's hidden truth (``path,class`` CSV): key -> 1 = LEAK."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: adapt.pool_truth: no such file")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if not {"path", "class"} <= set(reader.fieldnames or []):
            raise DataError(f"{path}: adapt.pool_truth needs the columns path and class")
        return {row["path"].strip(): int(row["class"].strip() == LEAK_CLASS) for row in reader}


def load_field(items: list[tuple[str, Path]], detector: Network, min_fraction: float, *,
               labels: list[int] | None = None, desc: str = "read",
               progress: bool = False) -> FieldSet:
    """Features of every readable recording; unreadable ones are listed, not fatal."""
    keys, mels, truth, failed = [], [], [], []
    for i, (key, path) in enumerate(tqdm(items, desc=desc, unit="rec", disable=not progress)):
        try:
            parts = [p.mel for p in prepare(path, detector, min_fraction, MAX_CLIPS_PER_PART)]
        except (AudioError, OSError) as exc:
            failed.append(f"{key}: {exc}")
            continue
        keys.append(key)
        mels.append(np.concatenate(parts))
        if labels is not None:
            truth.append(labels[i])
    if failed:
        log.warning("%s: %d of %d recordings unreadable, left out (first: %s)", desc,
                    len(failed), len(items), failed[0])
    if not keys:
        raise DataError(f"{desc}: none of the {len(items)} recordings is readable")
    return FieldSet(tuple(keys), tuple(mels),
                    np.asarray(truth, dtype=np.int64) if labels is not None else None,
                    tuple(failed))


def score_field(network: Network, field: FieldSet, *, prob_mode: str, rule: str,
                vote_fraction: float, runtime: Runtime, budget: int) -> FieldScores:
    """Every recording's rule score, long-segment probabilities and class probabilities."""
    model = network.inference_model().to(runtime.device)
    shape = network.features.segment_shape
    scores, long_probs, class_probs, seg_probs = [], [], [], []
    for mel in field.mel:
        out = score_batches(model, array_batches(mel, budget, network.input_norm),
                            segments=(shape[0], shape[1]), leak_index=network.leak_index,
                            prob_mode=prob_mode, runtime=runtime)   # type: ignore[arg-type]
        probs = out.seg_probs.reshape(1, -1, shape[1])                 # (1, clips * L, S)
        scores.append(float(file_scores(probs, rule, vote_fraction)[0]))  # type: ignore[arg-type]
        long_probs.append(long_segment_probs(probs)[0])                # (clips * L,)
        class_probs.append(out.class_probs.mean(axis=0))               # (C,)
        seg_probs.append(out.seg_probs)                                # (clips, L, S)
    return FieldScores(np.asarray(scores), long_probs, np.stack(class_probs), tuple(seg_probs))


def score_detector(detector: Detector, field: FieldSet, runtime: Runtime,
                   budget: int) -> FieldScores:
    """``score_field`` under the detector's own probability mode and rule."""
    voting = detector.voting
    return score_field(detector, field, prob_mode=voting.prob_mode, rule=voting.rule,
                       vote_fraction=voting.vote_fraction, runtime=runtime, budget=budget)


def domain_summary(detector: Detector, field: FieldSet) -> dict[str, Any]:
    """Counts of ``in`` / ``shifted`` / ``unknown`` recordings under the detector's domain
    check and each shifted recording's distance and reason (key -> "D: reason"). The field
    set's native rates are not kept, so a narrow band shows only through its empty bands."""
    f = detector.features
    centers = band_centers_hz(f.n_mels, f.fmin, f.fmax)
    checks = {key: assess(detector.domain, band_profile(mel), centers)
              for key, mel in zip(field.keys, field.mel, strict=True)}
    counts = Counter(check.domain for check in checks.values())
    whole = set_check(detector.domain, np.array([c.distance for c in checks.values()]))
    return {**{name: counts.get(name, 0) for name in ("in", SHIFTED, "unknown")},
            "set": whole.to_dict(),
            "shifted_recordings": {key: f"{c.distance:.3f}: {c.reason}"
                                   for key, c in checks.items() if c.domain == SHIFTED}}
