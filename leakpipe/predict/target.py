"""Where `leakpipe predict` writes, checked before a recording is scored, and the record of the
detector whose rows a CSV holds.

- ``--out`` is never one of the recordings, nor is a file beside it (resolved paths compared:
  `predict rec.wav --out rec.wav` would replace the recording with the CSV). An existing
  ``--out`` is replaced only with ``--force`` and continued only with ``--resume``; without
  either it is refused. A folder, or a place that cannot be written (``--explain`` too), is one
  line before anything is loaded or scored, not a traceback after.
- ``<stem>_detector.json`` beside the CSV names the detector whose rows the CSV holds (its
  file's SHA-256, the model as named, the rule and the threshold on the CSV's ``leak_prob``
  scale, as its ``threshold`` column shows it), written before the CSV.
  ``--resume`` refuses a CSV of another detector, or one without the record, with one line
  naming both: two detectors' decisions (two thresholds) in one file could not be told apart
  afterwards. A file beside the CSV rather than a column (the same 64 characters on every row)
  or a comment line (which CSV readers take for a row), like the timeline CSV and the domain
  JSON already beside it.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from leakpipe.detector import Detector
from leakpipe.errors import DataError
from leakpipe.files import file_sha256, json_text, os_problem, write_text_atomic
from leakpipe.predict.rows import DECIMALS, domain_path, timeline_path

STAMP_FORMAT = "leakpipe.predict_detector"
SHORT_SHA = 12   # hex digits of a SHA-256 shown in messages


@dataclass(frozen=True)
class DetectorStamp:
    """Which detector a predict CSV's rows come from."""

    sha256: str        # of the detector file
    model: str         # as named on the command line: a path or an MLflow URI
    rule: str
    threshold: float   # on the leak_prob scale, as the CSV's threshold column

    @classmethod
    def of(cls, model: str, file: Path, detector: Detector) -> DetectorStamp:
        return cls(file_sha256(file), model, detector.voting.rule,
                   round(detector.prob_threshold, DECIMALS))

    def named(self) -> str:
        return f"{self.model} (sha256 {self.sha256[:SHORT_SHA]})"


def stamp_path(out: Path) -> Path:
    """Where the detector record of the CSV ``out`` goes: ``predictions.csv`` ->
    ``predictions_detector.json``, beside it."""
    out = Path(out)
    return out.with_name(f"{out.stem}_detector.json")


def output_files(out: Path) -> tuple[Path, ...]:
    """Every file a predict run into ``out`` writes."""
    return Path(out), timeline_path(out), domain_path(out), stamp_path(out)


def check_target(out: Path, recordings: Sequence[Path], *, resume: bool, force: bool) -> None:
    """Refuse (``DataError``, one line) an ``--out`` that would overwrite a recording, an
    existing file without ``--resume`` / ``--force``, a folder, or a place not writable."""
    out = Path(out)
    inputs = {os.path.realpath(p) for p in recordings}
    for file in output_files(out):
        if os.path.realpath(file) in inputs:
            raise DataError(f"--out {out}: {file} is one of the recordings to score and would "
                            "be replaced; choose another --out")
    if out.is_dir():
        raise DataError(f"--out {out}: is a folder (--out names the CSV file to write)")
    if os.path.lexists(out) and not (resume or force):
        raise DataError(f"--out {out}: exists; --resume continues it, --force replaces it, "
                        "or choose another --out")
    if resume and not force and out.is_file():
        _check_same_call(out, recordings)
    writable(out, "--out")


def _check_same_call(out: Path, recordings: Sequence[Path]) -> None:
    """``--resume`` continues the call that wrote ``out``: a whole row for a recording this
    call does not name is refused, or the summary and the set domain check would count
    recordings the user did not ask about now."""
    named = {str(p) for p in recordings}
    other = [path for path in _row_paths(out) if path not in named]
    if other:
        raise DataError(f"--out {out}: --resume continues the call that wrote it, but it holds "
                        f"rows for {len(other)} recording(s) this call does not name (first: "
                        f"{other[0]}); name the same recordings, or --force to start over")


def _row_paths(out: Path) -> list[str]:
    """The ``path`` of every whole row of the CSV ``out`` (a line cut by a crash is no row)."""
    try:
        text = out.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DataError(f"--out {out}: cannot be read ({os_problem(out, exc)})") from None
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    reader = csv.DictReader(lines)
    return [row["path"] for row in reader          # a short row has None values, a long one
            if None not in row and None not in row.values() and row.get("path")]   # a None key


def check_folder(folder: Path, option: str) -> None:
    """Refuse (``DataError``) a ``folder`` to write into that is a file or cannot be made or
    written; nothing is created here."""
    folder = Path(folder)
    if os.path.lexists(folder) and not folder.is_dir():
        raise DataError(f"{option} {folder}: exists and is not a folder")
    _writable_folder(Path(os.path.abspath(folder)), option, folder)


def writable(path: Path, option: str) -> None:
    """``path`` can be written: itself, if there, and the folder it goes in (made when it is
    written). ``DataError`` otherwise, naming ``option`` and ``path``."""
    if os.path.lexists(path) and not os.access(path, os.W_OK):
        raise DataError(f"{option} {path}: not writable (permission denied)")
    _writable_folder(Path(os.path.abspath(path)).parent, option, path)


def _writable_folder(folder: Path, option: str, shown: Path) -> None:
    """``folder``'s nearest existing ancestor (itself, if there) is a folder this process may
    write in, so ``folder`` can be made and written."""
    ancestor = folder
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise DataError(f"{option} {shown}: cannot be written, {ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise DataError(f"{option} {shown}: cannot be written in {ancestor} (permission "
                        "denied)")


def check_resume(out: Path, stamp: DetectorStamp) -> None:
    """Refuse (``DataError``) to continue ``out`` unless its record names ``stamp``'s detector
    (the same file bytes); a CSV not there yet is a fresh start."""
    out = Path(out)
    if not os.path.lexists(out):
        return
    recorded = _read_stamp(stamp_path(out))
    if recorded is None:
        raise DataError(f"--resume: {out} has no {stamp_path(out).name} beside it naming the "
                        "detector of its rows (written by an older leakpipe or by hand); "
                        f"--force starts it over with {stamp.named()}")
    if recorded.sha256 != stamp.sha256:
        raise DataError(f"--resume: {out} holds the rows of detector {recorded.named()}, not "
                        f"of {stamp.named()}; one CSV holds one detector's decisions: choose "
                        "another --out, or --force to start it over")


def write_stamp(out: Path, stamp: DetectorStamp | None) -> None:
    """Record ``stamp`` beside ``out`` (before its rows); with none (a caller that did not name
    its detector file), remove an old record so no later ``--resume`` trusts it."""
    path = stamp_path(out)
    if stamp is None:
        path.unlink(missing_ok=True)
        return
    write_text_atomic(path, json_text({"format": STAMP_FORMAT, **asdict(stamp)}))


def _read_stamp(path: Path) -> DetectorStamp | None:
    """The record at ``path``; None when it is not there. One that cannot be read as one is a
    ``DataError`` naming it."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataError(f"{path}: {os_problem(path, exc)}") from None
    except ValueError as exc:   # JSON and UTF-8 errors
        raise DataError(f"{path}: not a predict detector record ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != STAMP_FORMAT:
        raise DataError(f"{path}: not a predict detector record (format is not {STAMP_FORMAT})")
    try:
        return DetectorStamp(str(raw["sha256"]), str(raw["model"]), str(raw["rule"]),
                             float(raw["threshold"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path}: not a predict detector record ({type(exc).__name__} "
                        f"{exc})") from None
