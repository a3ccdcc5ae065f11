"""The validation stamp: which splits `validate` passed, checked by the stages that read them.

`validate` writes the stamp (``reports/validated.json``) only when every check passed; a stage
given ``--validated`` refuses splits the stamp does not describe, so a split rebuilt or swapped
after validation is not silently used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leakpipe.data.reader import open_split
from leakpipe.errors import DataError


def read_stamp(path: Path) -> dict[str, Any]:
    """The stamp as written by `validate`; a missing, unreadable or failed stamp is an error."""
    try:
        stamp = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no validation stamp; run `leakpipe validate` "
                        "(or `dvc repro validate`) first") from None
    except json.JSONDecodeError:
        raise DataError(f"{path}: not valid JSON; re-run `leakpipe validate`") from None
    if not isinstance(stamp, dict) or not stamp.get("passed"):
        raise DataError(f"{path}: validation did not pass")
    return stamp


def check_validated(path: Path, splits: Mapping[str, Path]) -> None:
    """The split files (name -> HDF5 path) must be ones `validate` passed."""
    stamp = read_stamp(path)
    for split, split_path in splits.items():
        with open_split(split_path) as reader:
            files = reader.n_files
        passed = stamp.get("splits", {}).get(split, {}).get("files")
        if passed != files:
            raise DataError(f"{path}: {split}: validated {passed} files, the split holds "
                            f"{files}; re-run `leakpipe validate`")
