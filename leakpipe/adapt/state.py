"""The adapt stage's working folder (checkpoints/adapt): what lets a killed run resume.

``state.json`` lists every finished round (its figures, its pseudo-labels per pool recording,
accepted or rejected) and is rewritten atomically after each round; ``round-<r>/`` holds that
round's training split, its ``fit()`` checkpoints, network and detector. A run whose inputs
(params, seed detector, splits, pool) hash differently from the folder's starts afresh: the
folder is emptied first, so rounds of different inputs never mix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe.files import write_json_atomic

log = logging.getLogger(__name__)

STATE_NAME = "state.json"
STATE_VERSION = 1


def fingerprint(parts: Mapping[str, Any]) -> str:
    """A digest of everything that shapes the rounds."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class AdaptState:
    """The rounds done so far and where they live: the round state, one value per step.

    Frozen: ``with_run``, ``added`` and ``stopped`` return the next state and write it to
    ``state.json`` first, so the file never lags behind the value a round goes on with."""

    folder: Path
    fingerprint: str
    run_id: str | None = None
    stop_reason: str = ""
    rounds: tuple[dict[str, Any], ...] = ()

    @classmethod
    def open(cls, folder: Path, digest: str) -> AdaptState:
        """The folder's state when it belongs to these inputs, else a fresh (emptied) one."""
        folder = Path(folder)
        path = folder / STATE_NAME
        if path.is_file():
            raw = json.loads(path.read_text())
            if raw.get("version") == STATE_VERSION and raw.get("fingerprint") == digest:
                state = cls(folder, digest, raw.get("run_id"), raw.get("stop_reason", ""),
                            tuple(raw.get("rounds", [])))
                if state.rounds:
                    log.info("adapt: resuming; rounds 0..%d done in an earlier run",
                             state.rounds[-1]["round"])
                return state
            log.info("adapt: %s belongs to other inputs; starting afresh", folder)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        return cls(folder, digest)

    def round_dir(self, r: int) -> Path:
        """Round ``r``'s folder, made when missing."""
        path = self._round_path(r)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _round_path(self, r: int) -> Path:
        return self.folder / f"round-{r:02d}"

    def with_run(self, run_id: str | None) -> AdaptState:
        """This state in MLflow run ``run_id`` (saved: a resumed run reopens that run)."""
        return self._saved(dataclasses.replace(self, run_id=run_id))

    def added(self, entry: dict[str, Any], stop_reason: str = "") -> AdaptState:
        """This state with round ``entry`` finished and, given ``stop_reason``, adaptation
        ended for it (saved in one write: a kill never keeps a rejected round without the
        stop, which would let a resumed run carry on after it)."""
        changes: dict[str, Any] = {"rounds": (*self.rounds, entry)}
        if stop_reason:
            changes["stop_reason"] = stop_reason
        return self._saved(dataclasses.replace(self, **changes))

    def stopped(self, reason: str) -> AdaptState:
        """This state with adaptation ended for ``reason`` (saved)."""
        return self._saved(dataclasses.replace(self, stop_reason=reason))

    @staticmethod
    def _saved(state: AdaptState) -> AdaptState:
        state.save()
        return state

    def save(self) -> None:
        write_json_atomic(self.folder / STATE_NAME, {
            "version": STATE_VERSION, "fingerprint": self.fingerprint, "run_id": self.run_id,
            "stop_reason": self.stop_reason, "rounds": list(self.rounds)})

    @property
    def seed(self) -> dict[str, Any]:
        """Round 0: the seed detector as it stands, what every round is guarded against."""
        return self.rounds[0]

    @property
    def accepted(self) -> dict[str, Any]:
        """The newest round whose model stands (the seed when none was accepted)."""
        return next(e for e in reversed(self.rounds) if e["status"] != "rejected")

    @property
    def next_round(self) -> int:
        return len(self.rounds)

    def init_weights(self, seed_detector: Path) -> Path:
        """The weights the next round fine-tunes: the standing round's network, or the seed
        detector itself while no round was accepted."""
        standing = self.accepted["round"]
        return seed_detector if standing == 0 else self._round_path(standing) / "network.pt"
