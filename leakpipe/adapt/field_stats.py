"""Field recordings measured as a statistics detector measures them: read once, refitted on.

``measure_field`` decodes every pool (or check-set) recording once through the code `leakpipe
predict` scores a logger_stats recording with (``stats_detector.measure``: the statistics of
``build.stats`` at the recording's own rate, the signal checks of ``build.quality``). A
recording that cannot be read, or that a check of ``quality.reject`` refuses (a dead logger),
is listed and left out, as predict would give it no decision. ``pseudo_table`` turns the
pseudo-labelled ones into recordings a statistics model is fitted on, each its own site
(``field/<key>``: nothing says two pool recordings share one), so grouped folds never split
what they do not know to be one site.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from leakpipe.adapt.pseudo import LEAK
from leakpipe.adapt.round_split import PSEUDO_PREFIX
from leakpipe.audio.clips import AudioError
from leakpipe.audio.opening import open_audio
from leakpipe.baselines.logger_stats import RecordingTable
from leakpipe.errors import DataError
from leakpipe.stats_detector import StatsDetector, measure

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StatsField:
    """Usable field recordings: ``keys`` and their (R, S_all) statistics (``stat_names``
    order), with the 0/1 truth of a labelled set."""

    keys: tuple[str, ...]
    stats: np.ndarray
    truth: np.ndarray | None = None
    failed: tuple[str, ...] = ()          # "key: reason" of each recording left out

    def __len__(self) -> int:
        return len(self.keys)

    def subset(self, keys: tuple[str, ...]) -> StatsField:
        """These recordings only (``keys`` in this set's order)."""
        wanted = set(keys)
        keep = [i for i, k in enumerate(self.keys) if k in wanted]
        dropped = tuple(f"{k}: not usable by every part" for k in self.keys if k not in wanted)
        return StatsField(tuple(self.keys[i] for i in keep), self.stats[keep],
                          self.truth[keep] if self.truth is not None else None,
                          self.failed + dropped)


def measure_field(items: list[tuple[str, Path]], detector: StatsDetector, *,
                  labels: list[int] | None = None, desc: str = "read",
                  progress: bool = False) -> StatsField:
    """Every usable recording's statistics; the others listed, not fatal (none usable is)."""
    keys, rows, truth, failed = [], [], [], []
    for i, (key, path) in enumerate(tqdm(items, desc=desc, unit="rec", disable=not progress)):
        try:
            measured = measure(open_audio(path), detector)
        except (AudioError, OSError) as exc:
            failed.append(f"{key}: {exc}")
            continue
        if measured.stats is None:
            failed.append(f"{key}: {'; '.join(measured.problems)}")
            continue
        keys.append(key)
        rows.append(np.asarray(measured.stats, np.float32))
        if labels is not None:
            truth.append(labels[i])
    if failed:
        log.warning("%s: %d of %d recordings unreadable or refused, left out (first: %s)",
                    desc, len(failed), len(items), failed[0])
    if not keys:
        raise DataError(f"{desc}: none of the {len(items)} recordings is usable")
    return StatsField(tuple(keys), np.stack(rows),
                      np.asarray(truth, dtype=np.int64) if labels is not None else None,
                      tuple(failed))


def pseudo_table(field: StatsField, labels: Mapping[str, int], names: tuple[str, ...]
                 ) -> RecordingTable:
    """The pseudo-labelled recordings ``labels`` (key -> LEAK / not) of ``field`` as training
    recordings, each its own site; ``names`` are the statistics' (the labelled splits')."""
    keep = [i for i, k in enumerate(field.keys) if k in labels]
    keys = [field.keys[i] for i in keep]
    ids = np.asarray([PSEUDO_PREFIX + k for k in keys])
    return RecordingTable(path=Path("adapt.source"), recording_id=ids, group=ids.copy(),
                          truth=np.asarray([labels[k] == LEAK for k in keys], dtype=bool),
                          stats=field.stats[keep].reshape(len(keep), len(names)),
                          names=names, clip_recording=np.arange(len(keep)))


def joined(first: RecordingTable, second: RecordingTable) -> RecordingTable:
    """Two tables' recordings as one (``first``'s path; the clips of a recording table made
    by ``pseudo_table`` are its recordings)."""
    return RecordingTable(
        path=first.path, recording_id=np.concatenate([first.recording_id, second.recording_id]),
        group=np.concatenate([np.asarray(first.group).astype(str),
                              np.asarray(second.group).astype(str)]),
        truth=np.concatenate([first.truth, second.truth]),
        stats=np.concatenate([first.stats, second.stats]).astype(np.float32),
        names=first.names,
        clip_recording=np.concatenate([first.clip_recording,
                                       second.clip_recording + len(first)]))


__all__ = ["StatsField", "joined", "measure_field", "pseudo_table"]
