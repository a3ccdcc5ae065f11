"""The validation stamp: which split files `validate` passed, checked by every stage that reads
them.

`validate` writes the stamp (``reports/validated.json``) only when every check passed, with the
sha256 of each split file it checked. Training, tuning, evaluation and the baselines check the
files they are about to read against it and refuse any other bytes with one line: a split
rebuilt, edited or swapped after validation (or never validated) is not silently learned from
or reported on, whatever order the commands were run in. ``--unvalidated`` (an expert's choice)
skips the check; the stage then warns and tags its MLflow run ``leakpipe.unvalidated``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leakpipe.errors import DataError
from leakpipe.files import file_sha256
from leakpipe.tracking.names import DATASET_CONTEXT, TAG_DATA, TAG_UNVALIDATED, split_digests

if TYPE_CHECKING:
    from leakpipe.tracking import Tracker

log = logging.getLogger(__name__)

DEFAULT_STAMP = Path("reports/validated.json")
SHA256_KEY = "sha256"


def read_stamp(path: Path) -> dict[str, Any]:
    """The stamp as written by `validate`; a missing, unreadable or failed stamp is an error."""
    try:
        stamp = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no validation stamp; run `leakpipe validate` "
                        "(or `dvc repro validate`) first") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise DataError(f"{path}: not valid JSON; re-run `leakpipe validate`") from None
    if not isinstance(stamp, dict) or not stamp.get("passed"):
        raise DataError(f"{path}: validation did not pass")
    if not isinstance(stamp.get("splits"), dict):
        raise DataError(f"{path}: no 'splits' in the stamp; re-run `leakpipe validate`")
    return stamp


def require_validated(path: Path, splits: Mapping[str, Path]) -> dict[str, str]:
    """Each split file (name -> HDF5 path) must hold exactly the bytes `validate` passed;
    returns the sha256 of each."""
    stamp = read_stamp(path)
    hashes = {}
    for split, split_path in splits.items():
        entry = stamp["splits"].get(split)
        passed = entry.get(SHA256_KEY) if isinstance(entry, dict) else None
        if passed is None:
            raise DataError(f"{split_path}: {path} holds no validated {split!r} split; run "
                            "`leakpipe validate` (or `dvc repro validate`), or pass "
                            "--unvalidated to use it anyway")
        try:
            digest = file_sha256(split_path)
        except FileNotFoundError:
            raise DataError(f"{split_path}: no such file") from None
        if digest != passed:
            raise DataError(f"{split_path}: not the file `validate` passed (sha256 "
                            f"{digest[:12]}, {path} holds {passed[:12]}); run `leakpipe "
                            "validate` (or `dvc repro validate`), or pass --unvalidated to use "
                            "it anyway")
        hashes[split] = digest
    return hashes


@dataclass(frozen=True)
class SplitTrust:
    """How a stage came to trust its splits: the MLflow tags that record it (each file's
    sha256 named with its split, ``--unvalidated``) and the sha256 of each split file (logged
    as the run's datasets)."""

    tags: dict[str, str]
    sha256: dict[str, str]

    def log_datasets(self, tracker: Tracker, splits: Mapping[str, Path]) -> None:
        """Each split file as one of the run's MLflow datasets (name, content hash, path)."""
        for split, path in splits.items():
            tracker.log_dataset(path, split, self.sha256[split],
                                DATASET_CONTEXT.get(split, split))


def trust_splits(stamp: Path | None, splits: Mapping[str, Path]) -> SplitTrust:
    """Check ``splits`` against ``stamp`` (None: the expert's ``--unvalidated``, one WARNING,
    the files hashed all the same)."""
    if stamp is None:
        log.warning("%s: not checked against a validation stamp (--unvalidated); the run is "
                    "tagged %s", ", ".join(str(p) for p in splits.values()), TAG_UNVALIDATED)
        sha256 = {split: file_sha256(path) for split, path in splits.items()}
        return SplitTrust({TAG_UNVALIDATED: "true", TAG_DATA: split_digests(sha256)}, sha256)
    sha256 = require_validated(stamp, splits)
    return SplitTrust({TAG_DATA: split_digests(sha256)}, sha256)
