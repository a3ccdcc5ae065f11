"""One recording's work in `build`: read, check, clip and log-mel it; what a worker runs.

It sits below ``leakpipe.build`` (the orchestrator: splits, writers, report) so that both of
build's engines share it: the local pool (``leakpipe.features.pool``, the build process one
of its workers) and Dask workers on other machines (``leakpipe.cluster``). A worker only
reads audio and returns arrays; the build process alone writes the split files.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from leakpipe.audio.quality import Issue, SignalStats, find_issues, truncation
from leakpipe.config import FeatureConfig, QualityConfig, RecordingStatsConfig
from leakpipe.features.recording_stats import StatsAccumulator
from leakpipe.files import os_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordingResult:
    """Features of one recording, or the reason it could not be used."""

    index: int
    mel: np.ndarray | None = None        # (clips, n_long, n_short, n_mels, n_frames), job dtype
    waveform: np.ndarray | None = None   # (clips, clip_samples)
    error: str | None = None
    issues: tuple[Issue, ...] = ()       # failed signal checks (leakpipe.audio.quality)
    stats: np.ndarray | None = None      # (S,) whole-recording statistics
    rate: int = 0                        # the recording's own sample rate, Hz


@dataclass(frozen=True)
class RecordingJob:
    """What every recording of one build is processed with (sent once per task)."""

    features: FeatureConfig
    n_clips: int | None  # None = every non-overlapping clip
    min_fraction: float
    store_waveform: bool
    quality: QualityConfig
    stats: RecordingStatsConfig
    dtype: str = "float32"  # the mel's storage type (build.dtype): cast here, half the bytes sent


def process_recording(job: RecordingJob, index: int, path: Path) -> RecordingResult:
    """Load, check, clip, segment and log-mel one recording; errors become a reason string.

    The recording is decoded once, block by block: each block goes through the signal checks
    and the whole-recording statistics (at the recording's own rate) and gives up the frames of
    the clips that lie in it, so memory does not grow with its length. The order of the
    verdicts is that of a whole-file read: unreadable or non-finite audio first, then the
    checks in ``build.quality.reject``, then too short for a clip.
    """
    from leakpipe.audio.clips import AudioError, plan_clips
    from leakpipe.audio.io import read_clips
    from leakpipe.audio.opening import open_audio
    from leakpipe.features.mel import clip_features

    try:
        source = open_audio(path)
        signal = SignalStats(source.channels, source.subtype)
        levels = StatsAccumulator(job.stats, source.sample_rate)
        plan = plan_clips(source.frames, source.sample_rate, job.features, job.n_clips,
                          job.min_fraction)

        def on_block(block: np.ndarray) -> None:
            signal.add(block)
            levels.add(block)

        clips = read_clips(source, plan, on_block)  # (clips, clip_samples)
        issues = (*find_issues(signal.stats(), job.quality, source.subtype),
                  *truncation(source.frames, source.claimed_frames))
        rejected = [i.reason for i in issues if i.check in job.quality.reject]
        if rejected:
            return RecordingResult(index, error=f"{path}: {'; '.join(rejected)} "
                                                "(build.quality.reject)", issues=issues)
        if plan.short:
            raise plan.too_short(path)
    except AudioError as exc:
        return RecordingResult(index, error=str(exc))
    except OSError as exc:
        return RecordingResult(index, error=f"{path}: {os_problem(path, exc)}")
    mel = clip_features(clips, job.features).astype(job.dtype, copy=False)
    return RecordingResult(index, mel=mel, waveform=clips if job.store_waveform else None,
                           issues=issues, stats=levels.values(), rate=source.sample_rate)


def run_one(args: tuple[RecordingJob, int, Path]) -> RecordingResult:
    """The local pool's task: one recording."""
    return process_recording(*args)


def run_chunk(job: RecordingJob, items: Sequence[tuple[int, Path]]) -> list[RecordingResult]:
    """A cluster task: consecutive recordings ``(index, path)``, one round trip for all."""
    return [process_recording(job, index, path) for index, path in items]


def one_blas_thread() -> None:
    """Limit BLAS (the mel filterbank's matrix product) to one thread in this process.

    The product per recording is small ((clips * segments, n_bins) @ (n_bins, n_mels)), so
    OpenBLAS's threads only wait on each other: measured with 2 threads, a recording's mel took
    4 to 6.5 ms against 0.6 to 0.9 ms with one, and every pool worker's threads spin on the
    same cores. Parallelism comes from the recordings; the product's bytes do not change.
    """
    threadpool_limits(1, user_api="blas")


def start_worker() -> None:
    """A helper's setup before its first recording: the audio and feature modules imported
    (scipy.signal: about 1.5 s), so its first chunk is not late, then one BLAS thread (after
    the imports: threadpoolctl limits only the libraries already loaded)."""
    import leakpipe.audio.io  # noqa: F401
    import leakpipe.features.mel  # noqa: F401

    one_blas_thread()


def fingerprint(result: RecordingResult) -> str:
    """SHA-256 over everything of a result that reaches the split files or the report (mel,
    waveform, statistics, rate, error, checks): equal fingerprints, equal bytes written."""
    digest = hashlib.sha256()
    for array in (result.mel, result.waveform, result.stats):
        digest.update(b"-" if array is None else
                      f"{array.dtype}{array.shape}".encode() + np.ascontiguousarray(array).data)
    digest.update(f"{result.rate}|{result.error}|{[i.check for i in result.issues]}".encode())
    return digest.hexdigest()


def mel_difference(a: RecordingResult, b: RecordingResult) -> float | None:
    """Largest absolute difference between two results' log-mel values (dB); None when either
    has no mel or their shapes differ."""
    if a.mel is None or b.mel is None or a.mel.shape != b.mel.shape:
        return None
    return float(np.max(np.abs(a.mel.astype(np.float64) - b.mel.astype(np.float64)),
                        initial=0.0))


def verify_sample(n: int, count: int) -> set[int]:
    """``count`` of ``n`` recordings' indices, evenly spread over the manifest (the same
    ones on every run), for ``build --verify``."""
    count = min(count, n)
    return {round(i * (n - 1) / max(count - 1, 1)) for i in range(count)} if count else set()


def verify_results(job: RecordingJob,
                   computed: Mapping[int, tuple[Path, RecordingResult]]) -> dict[str, Any]:
    """Recompute each recording of ``computed`` (index -> its path and the result a worker
    returned) in this process and compare: byte-identical, or how far apart (dB).

    Workers on another CPU model may pick other float kernels (FFT, BLAS, libm), and then
    the last bits differ (docs/scale-out.md); a difference is reported, not an error: the
    split files hold what the workers computed.
    """
    differing = []
    for index, (path, theirs) in sorted(computed.items()):
        mine = process_recording(job, index, path)
        if fingerprint(mine) != fingerprint(theirs):
            differing.append({"path": str(path), "max_abs_db": mel_difference(mine, theirs)})
    if differing:
        log.warning("build --verify: %d of %d recordings differ from this machine's result, "
                    "first %s by up to %s dB (other CPU kernels on the workers?)",
                    len(differing), len(computed), differing[0]["path"],
                    differing[0]["max_abs_db"])
    else:
        log.info("build --verify: %d recordings recomputed here, byte-identical",
                 len(computed))
    return {"recordings": len(computed), "identical": len(computed) - len(differing),
            "differing": differing}
