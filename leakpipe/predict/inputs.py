"""What `leakpipe predict` and the served detector read: the recordings named, each read,
checked and turned into features, a batch's worth of clips at a time.

- **The selection** (``select_recordings``): files as named, folders searched recursively. A
  path that does not exist, or a selection with no recording at all, is a one-line
  ``DataError``: an exit code of 0 must mean that recordings were scored. A file with the
  suffix of an audio format that leakpipe does not read (``UNREAD_AUDIO_SUFFIXES``: ``.mp3``
  ...) gets an ``unusable`` row saying so, in a folder and named alike: build and cv refuse
  them with the same reason (``leakpipe.audio.opening.unread_format``), so no detector learnt
  from their (lossy, band-cut) sound.
- **The signal checks** of build (``leakpipe.audio.quality``: dead, clipped, DC offset, and the
  reader's ``truncated``), with the detector's `build.quality`: a check in its ``reject`` makes
  the recording ``unusable`` (no decision, its reason in ``notes``), any other only notes it,
  and a dead (constant, all-zero included) channel is refused whatever ``reject`` says: a
  silent logger must never read as "no leak".
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from leakpipe.audio.clips import AudioError, plan_clips
from leakpipe.audio.io import stream_clips
from leakpipe.audio.opening import AudioSource, open_audio, unread_format
from leakpipe.audio.quality import DEAD, SignalStats, find_issues, truncation
from leakpipe.audio.resampling import resampled_length
from leakpipe.config import QualityConfig
from leakpipe.constants import AUDIO_SUFFIXES, UNREAD_AUDIO_SUFFIXES
from leakpipe.data.identity import Recording, identities
from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.features.mel import clip_features
from leakpipe.files import listed_entries, os_problem
from leakpipe.predict.rows import STATUS_UNUSABLE, Failed, Prepared

log = logging.getLogger(__name__)

PREDICT_SUFFIXES = AUDIO_SUFFIXES + UNREAD_AUDIO_SUFFIXES   # what a folder lists: rows for all


class Unusable(AudioError):
    """A recording that cannot carry a leak decision: its signal fails a refused check, or its
    format is one leakpipe does not read. Its row says ``unusable``; the message names it."""


def find_recordings(paths: Iterable[Path],
                    suffixes: Sequence[str] = AUDIO_SUFFIXES) -> list[Path]:
    """Files as given; folders searched recursively for files with ``suffixes``; order kept,
    each recording once.

    In a folder every entry with such a suffix counts, a folder or a symlink loop so named
    too: it gets an error row with its reason rather than no row (as build lists it). One
    recording named twice (``a.wav`` and ``in/../a.wav``, a symlink, a byte-identical copy:
    ``leakpipe.data.identity``, as build compares them) is scored once, under its first name,
    so that neither the summary nor the set domain check counts it twice.
    """
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += listed_entries(path, suffixes)
        else:
            found.append(path)
    found = list(dict.fromkeys(found))
    first: dict[str, Path] = {}
    repeats: list[tuple[Path, Path]] = []          # (a repeat, the name it repeats)
    for path, key in zip(found, identities([Recording(p, str(p), "", "") for p in found]),
                         strict=True):
        if first.setdefault(key, path) is not path:
            repeats.append((path, first[key]))
    if repeats:
        log.info("%d recording(s) named twice are scored once, first: %s (the same recording "
                 "as %s)", len(repeats), *repeats[0])
    return list(first.values())


def select_recordings(paths: Sequence[Path]) -> list[Path]:
    """What `leakpipe predict` scores under ``paths`` (``PREDICT_SUFFIXES`` in folders).

    A path that is not there (not even a broken symlink, which gets its row) or a selection
    without one recording is a ``DataError``, before anything is loaded or written.
    """
    for path in map(Path, paths):
        if not os.path.lexists(path):
            raise DataError(f"{path}: no such file or folder (nothing scored)")
    found = find_recordings(paths, PREDICT_SUFFIXES)
    if not found:
        named = ", ".join(map(str, paths))
        raise DataError(f"{named}: no recordings ({', '.join(PREDICT_SUFFIXES)}) found "
                        "(nothing scored)")
    return found


def prepare(recording: Path | AudioSource, detector: Detector, min_fraction: float,
            max_clips: int, quality: QualityConfig | None = None, *,
            on_block: Callable[[np.ndarray], None] | None = None) -> Iterator[Prepared]:
    """Read, resample, cover with clips and compute features, ``max_clips`` clips at a time.

    The clips are evenly spaced from start to end, as many as cover the recording (one
    zero-padded clip if it is shorter than one). The recording is decoded block by block, so a
    long one comes in parts; the last part only once the whole file has been read and checked:
    with ``quality``, by build's signal checks (``Unusable`` for a refused one, the others in
    the last part's ``notes``). ``recording`` is a file or samples in memory
    (``waveform_source``: a served request). ``on_block`` also gets every decoded block
    (frames, channels), as the signal checks do: a fused detector's statistics come from the
    same one decoding. Raises ``AudioError``, possibly after some parts (the caller drops them).
    """
    f = detector.features
    source = recording if isinstance(recording, AudioSource) else open_audio(recording)
    path = source.path
    n = resampled_length(source.frames, source.sample_rate, f.sample_rate)
    plan = plan_clips(source.frames, source.sample_rate, f, max(1, math.ceil(n / f.clip_samples)),
                      min_fraction)
    duration = n / f.sample_rate
    notes = (f"shorter than one {f.clip_s:g} s clip ({duration:.3f} s): zero-padded"
             if n < f.clip_samples else "")
    starts_s = plan.starts / f.sample_rate                          # (clips,)
    band = source.sample_rate / 2                                   # its own Nyquist, Hz
    signal = SignalStats(source.channels, source.subtype)
    watchers = [w for w in (signal.add if quality is not None else None, on_block) if w]

    def each_block(block: np.ndarray) -> None:
        for watch in watchers:
            watch(block)

    clips: list[np.ndarray] = []
    done = 0
    for clip in stream_clips(source, plan, each_block if watchers else None):
        clips.append(clip)
        if len(clips) == max_clips and done + len(clips) < plan.n_clips:
            yield Prepared(path, clip_features(np.stack(clips), f),
                           starts_s[done:done + len(clips)], duration, band, notes, last=False)
            done, clips = done + len(clips), []
    if quality is not None:
        notes = "; ".join(filter(None, (notes, signal_notes(source, signal, quality))))
    if plan.short:
        raise plan.too_short(path)
    yield Prepared(path, clip_features(np.stack(clips), f), starts_s[done:], duration, band,
                   notes)


def signal_notes(source: AudioSource, signal: SignalStats, quality: QualityConfig) -> str:
    """The checks ``source`` fails that only flag it, as a note; ``Unusable`` when one of them
    is refused (in ``quality.reject``, or dead)."""
    issues = [*find_issues(signal.stats(), quality, source.subtype),
              *truncation(source.frames, source.claimed_frames)]
    refused = [i.reason for i in issues if i.check in quality.reject or i.check == DEAD]
    if refused:
        raise Unusable(f"{source.path}: {'; '.join(refused)}: no leak decision on this signal "
                       "(build.quality.reject; a dead channel always)")
    return "; ".join(f"flagged: {i.reason}" for i in issues)


def prepare_all(recordings: Iterable[Path | AudioSource], detector: Detector,
                min_fraction: float, max_clips: int,
                quality: QualityConfig | None) -> Iterator[Prepared | Failed]:
    """``prepare`` of each recording in turn; one that cannot be used becomes a ``Failed``
    (``unusable`` for a refused signal or format, ``error`` when it cannot be read)."""
    for recording in recordings:
        in_memory = isinstance(recording, AudioSource)
        path = recording.path if isinstance(recording, AudioSource) else recording
        if not in_memory and (reason := unread_format(path)):
            yield Failed(path, reason, STATUS_UNUSABLE)
            continue
        try:
            yield from prepare(recording, detector, min_fraction, max_clips, quality)
        except Unusable as exc:
            yield Failed(path, str(exc), STATUS_UNUSABLE)
        except AudioError as exc:
            yield Failed(path, str(exc))
        except OSError as exc:
            yield Failed(path, f"{path}: {os_problem(path, exc)}")
