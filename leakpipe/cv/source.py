"""`leakpipe cv --source`: build any recordings into ``DIR/data``, then make sure no recording is
in two places before a fold is cut.

The pipeline's splits reach `crossval` only through `validate` (its stamp); splits built here
are cross-validated at once, so the checks `validate` runs between splits run here on them:
no recording id, no group (site) and no content in two splits (``leakpipe.validate.cross``).
The build itself already refuses a file listed twice or copied (``leakpipe.data.identity``);
these catch what only the features show, such as one audio stored as WAV and as FLAC.
"""

from __future__ import annotations

from pathlib import Path

from leakpipe.build import run_build
from leakpipe.cluster import ClusterSettings
from leakpipe.config import load_section
from leakpipe.constants import SPLITS
from leakpipe.cv.outdir import OutLayout
from leakpipe.errors import DataError
from leakpipe.validate.split_validation import cross_split_failures


def build_source(params: Path, source: Path, layout: OutLayout, *, group_by: str | None = None,
                 sample_rate: int | None = None, progress: bool = True,
                 cluster: ClusterSettings | None = None) -> dict[str, Path]:
    """Build ``source`` with the params file's `build` section (at ``sample_rate`` when
    given) into ``layout.data`` (on the Dask ``cluster`` when given: the same bytes), check
    the splits against each other; returns split name -> file."""
    run_build(params, source, layout.data, layout.build_report, group_by=group_by,
              sample_rate=sample_rate, progress=progress, cluster=cluster)
    splits = {s: layout.data / f"{s}.h5" for s in SPLITS}
    check_disjoint(splits, params)
    return splits


def check_disjoint(splits: dict[str, Path], params: Path) -> None:
    """A ``DataError`` naming the first failed check between the splits (`validate`'s and
    ``content_in_one_group``), if any; the `validate` section gives the read size and limits."""
    failures = cross_split_failures(splits, load_section(params, "validate"))
    if failures:
        first = failures[0]
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise DataError(f"{splits.get(first.split, '')}: {first.summary()}{more}; folds "
                        "need every recording, site and content in one place (`leakpipe "
                        f"validate --data-dir {next(iter(splits.values())).parent}` lists the "
                        "checks between splits)")
