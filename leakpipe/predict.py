"""`leakpipe predict`: leak decisions for new recordings with a saved detector.

Each recording is read like `build` reads it (any WAV / FLAC / OGG, resampled to the model's
rate, with the feature config stored in the detector file, so features always match training),
covered by clips of the model's clip length (evenly spaced from start to end, as build places
its clips; a recording shorter than one clip is zero-padded), and scored. All long segments of
a recording are then voted on together with the detector's rule and threshold: one row per
recording with the leak probability (the rule's score: LEAK <=> score >= threshold), the
decision, the rule, the share of long segments at or above the threshold and the
long-segment probabilities over time (a timeline). A recording that cannot be read gets a row
with its reason in ``notes``.

``run_predict`` is what `leakpipe predict` calls: the runtime, the detector (a file or an
MLflow model URI), its scoring rules, ``predict``, one summary line.

Recordings are scored in batches of many recordings up to a segment budget sized from free
memory; rows are appended (and flushed) after every batch, so ``resume`` continues an
interrupted run by skipping the recordings already in the output.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn
from tqdm import tqdm

from leakpipe import tracking
from leakpipe.allocator import retain_freed_memory
from leakpipe.audio.io import AudioError, make_clips, read_audio, resample
from leakpipe.config import load_section
from leakpipe.constants import AUDIO_SUFFIXES, DECISION_NAMES
from leakpipe.decision.voting import file_scores, long_segment_probs
from leakpipe.detector import Detector, load_detector
from leakpipe.errors import DataError
from leakpipe.features.mel import clip_features
from leakpipe.files import csv_text, write_text_atomic
from leakpipe.runtime import Runtime, make_runtime
from leakpipe.scoring.batching import BatchLimits, array_batches, batch_segments
from leakpipe.scoring.score import score_batches

log = logging.getLogger(__name__)

COLUMNS = ("path", "status", "leak_prob", "decision", "threshold", "rule", "prob_mode",
           "vote_fraction", "frac_long_over", "n_long", "duration_s", "long_starts_s",
           "long_probs", "notes")
STATUS_OK, STATUS_ERROR = "ok", "error"
DECIMALS = 4               # probabilities and times in the CSV


@dataclass(frozen=True)
class Prepared:
    """One readable recording, cut and turned into features."""

    path: Path
    mel: np.ndarray         # (clips, n_long, n_short, n_mels, n_frames) float32
    starts_s: np.ndarray    # (clips,) clip start in seconds
    duration_s: float
    notes: str = ""

    @property
    def segments(self) -> int:
        return int(np.prod(self.mel.shape[:3]))


@dataclass(frozen=True)
class Failed:
    path: Path
    reason: str


@dataclass(frozen=True)
class PredictSummary:
    written: int
    skipped: int
    errors: int
    leaks: int
    seconds: float


@dataclass(frozen=True)
class ScoringRules:
    """Batch caps, memory margins and the shortest usable recording of a predict run."""

    limits: BatchLimits
    min_clip_fraction: float


def scoring_rules(detector: Detector, params: Path) -> ScoringRules:
    """The detector's own rules (evaluate stores them); for detector files older than that,
    the `evaluate`, `preload` and `build` sections of ``params``."""
    if detector.batch_limits is not None and detector.min_clip_fraction is not None:
        return ScoringRules(detector.batch_limits, detector.min_clip_fraction)
    if not Path(params).is_file():
        raise DataError(f"{params}: no such params file, and the detector (written before "
                        "detectors held their scoring rules) has none; re-run evaluate")
    ev, pre = load_section(params, "evaluate"), load_section(params, "preload")
    return ScoringRules(
        BatchLimits(max_segments=ev.max_batch_segments,
                    cpu_max_segments=ev.cpu_max_batch_segments, safety=pre.safety,
                    host_reserve_mb=pre.host_reserve_mb, device_reserve_mb=pre.device_reserve_mb),
        load_section(params, "build").min_clip_fraction)


def resolve_model(spec: str) -> Path:
    """A local detector file for a path or an MLflow URI (``models:/...``, ``runs:/...``)."""
    return tracking.download_model(spec) if tracking.is_model_uri(spec) else Path(spec)


def find_recordings(paths: Iterable[Path]) -> list[Path]:
    """Files as given; folders searched recursively for audio files; order kept, no repeats."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.rglob("*")
                            if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def prepare(path: Path, detector: Detector, min_fraction: float) -> Prepared:
    """Read, resample, cover with clips and compute features; raises ``AudioError``."""
    f = detector.features
    x, rate = read_audio(path)
    x = resample(x, rate, f.sample_rate)                             # (n,)
    n_clips = max(1, math.ceil(len(x) / f.clip_samples))
    try:
        clips = make_clips(x, f.clip_samples, n_clips, min_fraction)  # (clips, clip_samples)
    except AudioError as exc:
        raise AudioError(f"{path}: {exc}") from None
    # the clip starts make_clips uses: evenly spaced from 0 to n - clip_samples
    starts = np.round(np.linspace(0, max(0, len(x) - f.clip_samples), n_clips))
    duration = len(x) / f.sample_rate
    notes = (f"shorter than one {f.clip_s:g} s clip ({duration:.3f} s): zero-padded"
             if len(x) < f.clip_samples else "")
    return Prepared(path, clip_features(clips, f), starts / f.sample_rate, duration, notes)


def _prepare_all(paths: Sequence[Path], detector: Detector,
                 min_fraction: float) -> Iterator[Prepared | Failed]:
    for path in paths:
        try:
            yield prepare(path, detector, min_fraction)
        except AudioError as exc:
            yield Failed(path, str(exc))
        except OSError as exc:
            yield Failed(path, f"{path}: {exc.strerror or exc}")


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


def _fmt(values: np.ndarray) -> str:
    return " ".join(f"{v:.{DECIMALS}f}" for v in values)


def result_row(prep: Prepared, seg_probs: np.ndarray, detector: Detector) -> dict[str, Any]:
    """One recording's row: every long segment of every clip votes together."""
    voting, f = detector.voting, detector.features
    probs = seg_probs.reshape(1, -1, seg_probs.shape[-1])            # (1, clips * L, S)
    score = float(file_scores(probs, voting.rule, voting.vote_fraction)[0])
    long_probs = long_segment_probs(probs)[0]                        # (clips * L,)
    offsets = np.arange(seg_probs.shape[1]) * f.long_hop / f.sample_rate   # (L,)
    starts = (prep.starts_s[:, None] + offsets[None, :]).reshape(-1)       # (clips * L,)
    return {**_rule_fields(detector), "path": str(prep.path), "status": STATUS_OK,
            "leak_prob": round(score, DECIMALS),
            "decision": DECISION_NAMES[int(score >= detector.threshold)],
            "frac_long_over": round(float((long_probs >= detector.threshold).mean()), DECIMALS),
            "n_long": len(long_probs), "duration_s": round(prep.duration_s, DECIMALS),
            "long_starts_s": _fmt(starts), "long_probs": _fmt(long_probs), "notes": prep.notes}


def error_row(failed: Failed, detector: Detector) -> dict[str, Any]:
    empty = {name: "" for name in COLUMNS}
    return {**empty, **_rule_fields(detector), "path": str(failed.path),
            "status": STATUS_ERROR, "notes": failed.reason}


def _rule_fields(detector: Detector) -> dict[str, Any]:
    voting = detector.voting
    return {"threshold": detector.threshold, "rule": voting.rule,
            "prob_mode": voting.prob_mode, "vote_fraction": voting.vote_fraction}


# -- output file ---------------------------------------------------------------------------------

def completed_rows(path: Path) -> list[dict[str, str]]:
    """Whole rows of an earlier output (a line cut off by a crash is dropped)."""
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise DataError(f"{path}: not a `leakpipe predict` output (columns differ); "
                            "choose another --out or drop --resume")
        rows = list(reader)
    return [row for row in rows if None not in row.values() and row["status"] in
            (STATUS_OK, STATUS_ERROR)]


def _start_output(path: Path, rows: list[dict[str, str]]) -> None:
    """Rewrite ``path`` atomically with its header and ``rows`` (kept from a resumed run)."""
    write_text_atomic(path, csv_text(rows, COLUMNS))


# -- the run ---------------------------------------------------------------------------------

def predict(paths: Sequence[Path], detector: Detector, out: Path, *, runtime: Runtime,
            rules: ScoringRules, resume: bool = False, progress: bool = True,
            max_batch_segments: int | None = None) -> PredictSummary:
    """Score every recording under ``paths`` into the CSV ``out``.

    ``max_batch_segments`` overrides the rules' cap on segments per forward pass.
    """
    start = time.perf_counter()
    kept = completed_rows(out) if resume else []
    done = {row["path"] for row in kept}
    todo = [p for p in find_recordings(paths) if str(p) not in done]
    _start_output(out, kept)
    model = detector.inference_model().to(runtime.device)
    limits = rules.limits
    if max_batch_segments:
        limits = dataclasses.replace(limits, max_segments=max_batch_segments,
                                     cpu_max_segments=max_batch_segments)
    budget = batch_segments(detector.model_cfg, detector.features.segment_shape[2:],
                            runtime.device, limits)
    counts = {"written": 0, "errors": 0, "leaks": 0}
    with out.open("a", newline="") as handle, \
            tqdm(total=len(todo), desc="predict", unit="rec", disable=not progress) as bar:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        for group in _groups(_prepare_all(todo, detector, rules.min_clip_fraction), budget):
            rows = _score_group(group, detector, model, runtime, budget)
            writer.writerows(rows)
            handle.flush()
            _count(counts, rows)
            bar.update(len(group))
    return PredictSummary(written=counts["written"], skipped=len(done), errors=counts["errors"],
                          leaks=counts["leaks"], seconds=time.perf_counter() - start)


def _groups(items: Iterator[Prepared | Failed],
            budget: int) -> Iterator[list[Prepared | Failed]]:
    """Consecutive recordings holding about ``budget`` segments together."""
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
                 runtime: Runtime, budget: int) -> list[dict[str, Any]]:
    ready = [item for item in group if isinstance(item, Prepared)]
    probs: list[np.ndarray] = []
    if ready:
        mel = np.concatenate([p.mel for p in ready])                  # (clips, L, S, M, T)
        all_probs = score_segments(detector, model, mel, runtime, budget)  # (clips, L, S)
        probs = np.split(all_probs, np.cumsum([len(p.mel) for p in ready])[:-1])
    by_path = {p.path: (p, q) for p, q in zip(ready, probs, strict=True)}
    return [result_row(*by_path[item.path], detector) if isinstance(item, Prepared)
            else error_row(item, detector) for item in group]


def _count(counts: dict[str, int], rows: list[dict[str, Any]]) -> None:
    counts["written"] += len(rows)
    counts["errors"] += sum(row["status"] == STATUS_ERROR for row in rows)
    counts["leaks"] += sum(row["decision"] == DECISION_NAMES[1] for row in rows)


def load(spec: str) -> Detector:
    """The detector named by a path or an MLflow model URI."""
    return load_detector(resolve_model(spec))


def run_predict(paths: Sequence[Path], model: str, out: Path, params: Path, *,
                device: str = "auto", resume: bool = False, progress: bool = True,
                max_batch_segments: int | None = None) -> int:
    """The whole command; returns the exit code (errors raise ``LeakpipeError``)."""
    runtime = make_runtime(device, "auto", device_key="--device")
    retain_freed_memory()                 # CPU inference reuses its activation buffers
    detector = load(model)
    summary = predict(paths, detector, out, runtime=runtime,
                      rules=scoring_rules(detector, params), resume=resume,
                      progress=progress, max_batch_segments=max_batch_segments)
    print(f"predict: {summary.written} recordings ({summary.leaks} LEAK, {summary.errors} "
          f"unreadable, {summary.skipped} kept from before) in {summary.seconds:.1f} s -> "
          f"{out} (rule {detector.voting.rule}, threshold {detector.threshold:g})")
    return 0
