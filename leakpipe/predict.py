"""`leakpipe predict`: leak decisions for new recordings with a saved detector.

Each recording is read like `build` reads it (any WAV / FLAC / OGG, resampled to the model's
rate, with the feature config stored in the detector file, so features always match training),
covered by clips of the model's clip length (evenly spaced from start to end, as build places
its clips; a recording shorter than one clip is zero-padded), and scored. All long segments of
a recording are then voted on together with the detector's rule and threshold: one row per
recording with the leak probability (the rule's score: LEAK <=> score >= threshold), the
decision, the rule, the share of long segments at or above the threshold, whether the
recording's band is narrower than the model's (``band_hz``, ``band_limited``), whether it is
like the training recordings (``domain``, ``domain_distance``, ``domain_reason``) and the
long-segment probabilities over time (a timeline, in time order with each segment's clip). A
recording that cannot be read gets an ``error`` row with its reason in ``notes``; one that
fails build's signal checks as the detector's `build.quality` refuses them (dead, always) an
``unusable`` row, with no decision (``leakpipe.predict_inputs``, which also selects, reads and
checks the recordings). The rows, and the two CSV files they go to (one short line per
recording; the timeline beside it, one line per long segment), are made in
``leakpipe.predict_rows``. Once every row is in, the set domain check of all of them
(``decision.domain.set_check``: are they, taken together, farther from the training
recordings than val's new sites are?) goes to a JSON beside the CSV.

What the command refuses before it scores anything, each with one line and a non-zero exit
(``leakpipe.predict_target``): a path that is not there or a selection without a recording,
an ``--out`` that is one of the recordings, exists (without ``--resume`` or ``--force``) or
cannot be written, and ``--resume`` of a CSV that another detector wrote.

``run_predict`` is what `leakpipe predict` calls: the runtime, the detector (a file or an
MLflow model URI), its scoring rules, ``predict``, one summary line; a detector of the
logger_stats or fused kind writes its own rows instead (``predict_stats``, ``predict_fused``).
``score_recordings`` gives the rows of files or of in-memory waveforms: the served detector
(``leakpipe.serve``) uses it.

Recordings are scored in batches of many recordings up to a segment budget sized from free
memory; rows and timelines are appended (and flushed) after every batch, so ``resume``
continues an interrupted run by skipping the recordings already scored in the output (a failed
row is tried again: the file may have been fixed). A recording is
decoded block by block and turned into features a batch's worth of clips at a time
(``prepare``), so a long one is scored in parts and only its probabilities are kept until its
row is written: memory does not grow with its length beyond those (clips x long x short
float32 values).
"""

from __future__ import annotations

import dataclasses
import logging
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
from leakpipe.audio.io import AudioSource
from leakpipe.audio.quality import DEAD_ONLY
from leakpipe.config import QualityConfig, load_section
from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.domain import SHIFTED, SetCheck, band_profile, set_check
from leakpipe.detector import Detector, load_detector
from leakpipe.errors import DataError
from leakpipe.files import os_problem
from leakpipe.predict_fused import ClipScoring, run_predict_fused
from leakpipe.predict_inputs import (  # here too for the callers of predict
    PREDICT_SUFFIXES,
    find_recordings,
    prepare,
    prepare_all,
    select_recordings,
)
from leakpipe.predict_rows import (  # the rows and files, here too for the callers of predict
    STATUS_ERROR,
    STATUS_UNUSABLE,
    Failed,
    OutputWriter,
    Prepared,
    completed_rows,
    distances_of,
    domain_path,
    error_row,
    result_row,
    start_outputs,
    timeline_path,
    write_set_check,
)
from leakpipe.predict_stats import run_predict_stats, stamp_of
from leakpipe.predict_target import (
    DetectorStamp,
    check_resume,
    check_target,
    stamp_path,
    write_stamp,
)
from leakpipe.runtime import Runtime, make_runtime
from leakpipe.scoring.batching import BatchLimits, array_batches, batch_segments
from leakpipe.scoring.score import score_batches
from leakpipe.stats_detector import FusedDetector, StatsDetector, load_any_detector

__all__ = ["PredictSummary", "Prepared", "ScoringRules", "batch_budget", "clip_scoring",
           "find_recordings", "load", "predict", "prepare", "result_row", "run_predict",
           "score_recordings", "score_segments", "scoring_rules"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictSummary:
    written: int
    skipped: int
    errors: int
    unusable: int
    leaks: int
    seconds: float
    domain_set: SetCheck          # the set domain check over every row in the output


@dataclass(frozen=True)
class ScoringRules:
    """Batch caps, memory margins, the shortest usable recording and the signal checks of a
    predict run."""

    limits: BatchLimits
    min_clip_fraction: float
    quality: QualityConfig = DEAD_ONLY    # build.quality; by default the dead check only


def scoring_rules(detector: Detector, params: Path) -> ScoringRules:
    """The detector's own rules (evaluate stores them); for detector files older than that,
    the `evaluate`, `preload` and `build` sections of ``params``."""
    if detector.batch_limits is not None and detector.min_clip_fraction is not None:
        limits, fraction = detector.batch_limits, detector.min_clip_fraction
    else:
        limits, fraction = _params_rules(params)
    quality = detector.quality if detector.quality is not None else params_quality(params)
    return ScoringRules(limits, fraction, quality)


def _params_rules(params: Path) -> tuple[BatchLimits, float]:
    if not Path(params).is_file():
        raise DataError(f"{params}: no such params file, and the detector (written before "
                        "detectors held their scoring rules) has none; re-run evaluate")
    ev, pre = load_section(params, "evaluate"), load_section(params, "preload")
    return (BatchLimits(max_segments=ev.max_batch_segments,
                        cpu_max_segments=ev.cpu_max_batch_segments, safety=pre.safety,
                        host_reserve_mb=pre.host_reserve_mb,
                        device_reserve_mb=pre.device_reserve_mb),
            load_section(params, "build").min_clip_fraction)


def params_quality(params: Path) -> QualityConfig:
    """`build.quality` of ``params`` for a detector file older than the checks (version 7);
    without the file, the checks that need no threshold, with a WARNING."""
    if Path(params).is_file():
        return load_section(params, "build").quality
    log.warning("%s: no such params file, and the detector (written before detectors held "
                "build.quality) has no signal checks: only dead recordings are refused, none is "
                "flagged clipped or DC; re-run evaluate", params)
    return DEAD_ONLY


def resolve_model(spec: str) -> Path:
    """A local detector file for a path or an MLflow URI (``models:/...``, ``runs:/...``)."""
    return tracking.download_model(spec) if tracking.is_model_uri(spec) else Path(spec)


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


# -- the run ---------------------------------------------------------------------------------

def predict(paths: Sequence[Path], detector: Detector, out: Path, *, runtime: Runtime,
            rules: ScoringRules, resume: bool = False, progress: bool = True,
            max_batch_segments: int | None = None,
            stamp: DetectorStamp | None = None) -> PredictSummary:
    """Score every recording under ``paths`` into the CSV ``out`` and its timeline CSV
    (``timeline_path(out)``).

    ``max_batch_segments`` overrides the rules' cap on segments per forward pass. ``stamp``
    names the detector's file: it is recorded beside ``out``, and ``resume`` continues only a
    CSV recorded with the same one (``predict_target``).
    """
    start = time.perf_counter()
    if resume and stamp is not None:
        check_resume(out, stamp)
    kept, kept_timeline = completed_rows(out) if resume else ([], [])
    done = {row["path"] for row in kept}
    todo = [p for p in find_recordings(paths, PREDICT_SUFFIXES) if str(p) not in done]
    try:
        write_stamp(out, stamp)                 # before the rows it names
        start_outputs(out, kept, kept_timeline)
        domain_path(out).unlink(missing_ok=True)    # written again once every row is in
    except OSError as exc:
        raise DataError(f"--out {out}: cannot be written ({os_problem(out, exc)})") from None
    model = detector.inference_model().to(runtime.device)
    budget = batch_budget(detector, rules, runtime, max_batch_segments)
    counts = {"written": 0, "errors": 0, "unusable": 0, "leaks": 0}
    summary_rows = [{k: row[k] for k in ("domain", "domain_distance")} for row in kept]
    with OutputWriter(out) as writer, \
            tqdm(total=len(todo), desc="predict", unit="rec", disable=not progress) as bar:
        for finished in score_recordings(todo, detector, model, runtime=runtime, budget=budget,
                                         min_fraction=rules.min_clip_fraction,
                                         quality=rules.quality):
            writer.write(finished)
            _count(counts, finished)
            summary_rows += [{k: row[k] for k in ("domain", "domain_distance")}
                             for row in finished]
            bar.update(len(finished))
    domain_set = set_check(detector.domain, np.asarray(distances_of(summary_rows)))
    write_set_check(out, domain_set, summary_rows)
    return PredictSummary(written=counts["written"], skipped=len(done), errors=counts["errors"],
                          unusable=counts["unusable"], leaks=counts["leaks"],
                          seconds=time.perf_counter() - start, domain_set=domain_set)


def batch_budget(detector: Detector, rules: ScoringRules, runtime: Runtime,
                 max_batch_segments: int | None = None) -> int:
    """Segments per forward pass: the rules' cap (or ``max_batch_segments``), sized from free
    memory on the runtime's device."""
    limits = rules.limits
    if max_batch_segments:
        limits = dataclasses.replace(limits, max_segments=max_batch_segments,
                                     cpu_max_segments=max_batch_segments)
    return batch_segments(detector.model_cfg, detector.features.segment_shape[2:],
                          runtime.device, limits)


def score_recordings(recordings: Iterable[Path | AudioSource], detector: Detector,
                     model: nn.Module, *, runtime: Runtime, budget: int, min_fraction: float,
                     quality: QualityConfig = DEAD_ONLY) -> Iterator[list[dict[str, Any]]]:
    """The rows of ``recordings`` (files or in-memory sources), in order, a batch at a time.

    ``model`` is the detector's network on the runtime's device and ``budget`` the segments
    per forward pass (``batch_segments``); ``quality`` the signal checks (the rules'). A
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


def _count(counts: dict[str, int], rows: list[dict[str, Any]]) -> None:
    counts["written"] += len(rows)
    counts["errors"] += sum(row["status"] == STATUS_ERROR for row in rows)
    counts["unusable"] += sum(row["status"] == STATUS_UNUSABLE for row in rows)
    counts["leaks"] += sum(row["decision"] == DECISION_NAMES[1] for row in rows)


def load(spec: str) -> Detector:
    """The detector named by a path or an MLflow model URI."""
    return load_detector(resolve_model(spec))


def run_predict(paths: Sequence[Path], model: str, out: Path, params: Path, *,
                device: str = "auto", resume: bool = False, force: bool = False,
                progress: bool = True, max_batch_segments: int | None = None) -> int:
    """The whole command; returns the exit code (errors raise ``LeakpipeError``).

    The recordings and ``out`` are checked before the detector is loaded (``predict_target``);
    ``force`` replaces an existing ``out``, ``resume`` continues it.
    """
    recordings = select_recordings(paths)
    check_target(out, recordings, resume=resume, force=force)
    runtime = make_runtime(device, "auto", device_key="--device")
    retain_freed_memory()                 # CPU inference reuses its activation buffers
    file = resolve_model(model)
    detector = load_any_detector(file)
    if isinstance(detector, StatsDetector):          # one verdict from the statistics
        run_predict_stats(paths, detector, out, stamp=stamp_of(model, file, detector),
                          resume=resume, progress=progress)
        return 0
    if isinstance(detector, FusedDetector):          # one verdict from clips and statistics
        scoring = clip_scoring(detector.cnn, scoring_rules(detector.cnn, params), runtime,
                               max_batch_segments)
        run_predict_fused(paths, detector, out, scoring=scoring,
                          stamp=stamp_of(model, file, detector), resume=resume,
                          progress=progress)
        return 0
    summary = predict(paths, detector, out, runtime=runtime,      # folders listed again
                      rules=scoring_rules(detector, params), resume=resume,
                      progress=progress, max_batch_segments=max_batch_segments,
                      stamp=DetectorStamp.of(model, file, detector))
    print(f"predict: {summary.written} recordings ({summary.leaks} LEAK, {summary.unusable} "
          f"unusable, {summary.errors} unreadable, {summary.skipped} kept from before) in "
          f"{summary.seconds:.1f} s -> {out}, timeline {timeline_path(out)}, detector "
          f"{stamp_path(out)} (rule {detector.voting.rule}, threshold {detector.threshold:g})")
    print(f"predict: {summary.domain_set.line()} -> {domain_path(out)}")
    if summary.domain_set.domain == SHIFTED:
        log.warning("predict: these recordings, taken together, are farther from the training "
                    "recordings than new sites of the training network are (set domain check "
                    "p = %.2g): expect less than the reported test figures; check the calls "
                    "against labelled recordings of this network first", summary.domain_set.p_value)
    return 0
