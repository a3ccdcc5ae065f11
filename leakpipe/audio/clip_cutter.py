"""Cut a recording's planned clips (``leakpipe.audio.clips.ClipPlan``) from its mono frames as
they stream in, block by block: each clip is resampled on its own as soon as its frames are all
in, so memory holds only the clips the current block reaches, and every clip is bit-identical
to the same clip cut from the whole recording resampled at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from leakpipe.audio.clips import ClipPlan
from leakpipe.audio.resampling import resample


class ClipCutter:
    """Collects each planned clip's input frames from consecutive mono blocks and resamples the
    clip as soon as they are all in; only clips that the current block reaches hold frames."""

    def __init__(self, plan: ClipPlan) -> None:
        self.plan = plan
        self.filling: dict[int, np.ndarray] = {}  # clip -> its input frames
        self.opened = 0  # clips whose input frames have begun
        self.done = 0    # clips made
        self.last: tuple[int, int, np.ndarray] | None = None  # span resampled last, and result

    def feed(self, mono: np.ndarray, pos: int) -> Iterator[np.ndarray]:
        """Take frames ``pos`` .. ``pos + len(mono)``; yield the clips they complete, in order."""
        plan, end = self.plan, pos + len(mono)
        while self.opened < plan.n_clips and plan.first[self.opened] < end:
            j = self.opened
            self.filling[j] = np.empty(plan.stop[j] - plan.first[j], np.float32)
            self.opened += 1
        for j, frames in self.filling.items():
            lo, hi = max(plan.first[j], pos), min(plan.stop[j], end)
            if hi > lo:
                frames[lo - plan.first[j]:hi - plan.first[j]] = mono[lo - pos:hi - pos]
        while self.done < self.opened and plan.stop[self.done] <= end:
            yield self._clip(self.done, self.filling.pop(self.done))
            self.done += 1

    def _clip(self, j: int, frames: np.ndarray) -> np.ndarray:
        plan = self.plan
        span = (int(plan.first[j]), int(plan.stop[j]))
        if self.last is None or self.last[:2] != span:  # a short recording's clips share one
            self.last = (*span, resample(frames, plan.sr_in, plan.sr_out))
        y = self.last[2]
        at = int(plan.starts[j]) - span[0] * plan.up // plan.down  # first is a multiple of down
        clip = np.zeros(plan.clip_samples, np.float32)  # zero-padded past a short recording
        piece = y[at:at + plan.clip_samples]
        clip[:len(piece)] = piece
        return clip
