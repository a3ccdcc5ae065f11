"""The folder of `leakpipe cv --out DIR`: one run at a time, and never a stale result in it.

``claimed(DIR)`` is held for the whole run:

- DIR must be a folder this process can write (made when missing); anything else is one line
  naming it, before any work;
- the folder itself is locked (``flock``, exclusive, not waiting): a second run into the same
  DIR refuses at once rather than fail later on a fold file the first one removed. The lock
  dies with its process, so a killed run never leaves DIR locked; it needs a local file
  system (as `tune`'s locks do);
- the outputs the previous run there wrote (``outputs``) are removed before work begins, so a
  run that fails leaves no earlier `cv.json` beside its own `build.json`. Only files the mark
  ``MARK`` lists are removed: leakpipe writes it, with this run's outputs, before anything
  else; a file of the user's is never touched, nor one this run reads (``--data-dir DIR/data``
  after a ``--source`` run). ``work/`` stays (a killed run resumes from it;
  ``leakpipe.cv.stage`` clears it when the inputs changed).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from leakpipe.constants import SPLITS
from leakpipe.cv.stage import PLOT_FIGURE, PLOT_ROWS, recordings_csv
from leakpipe.errors import DataError
from leakpipe.files import os_problem, write_json_atomic

MARK = ".leakpipe-cv.json"     # what the last run here wrote (its outputs), by leakpipe only


@dataclass(frozen=True)
class OutLayout:
    """Where `leakpipe cv --out DIR` puts everything."""

    root: Path

    @property
    def metrics(self) -> Path:
        return self.root / "cv.json"

    @property
    def predictions(self) -> Path:
        return self.root / "predictions.csv"

    @property
    def plots_dir(self) -> Path:
        return self.root / "plots"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def build_report(self) -> Path:
        return self.root / "build.json"

    def outputs(self) -> list[Path]:
        """Every file a run writes here outside ``work/`` (build's failed report included)."""
        report = self.build_report
        return [self.metrics, self.predictions, recordings_csv(self.predictions),
                self.plots_dir / PLOT_ROWS, self.plots_dir / PLOT_FIGURE, report,
                report.with_name(f"{report.stem}.failed.json"),
                *(self.data / f"{s}.h5" for s in SPLITS)]


@contextmanager
def claimed(root: Path, inputs: Collection[Path] = ()) -> Iterator[OutLayout]:
    """DIR made, locked and cleared of the previous run's outputs (but ``inputs``), for the
    ``with`` body."""
    layout = OutLayout(Path(root))
    _make_folder(layout.root)
    try:
        fd = os.open(layout.root, os.O_RDONLY)
    except OSError as exc:
        raise DataError(f"{layout.root}: cannot open the --out folder "
                        f"({os_problem(layout.root, exc)})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataError(f"{layout.root}: another leakpipe cv run holds this folder (--out); "
                            "wait for it to end or choose another --out") from None
        _clear_previous(layout, {os.path.realpath(p) for p in inputs})
        yield layout
    finally:
        os.close(fd)   # releases the lock


def _make_folder(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise DataError(f"{root}: exists and is not a folder (--out names a folder)")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{root}: cannot create the --out folder ({os_problem(root, exc)})") \
            from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DataError(f"{root}: the --out folder is not writable")


def _clear_previous(layout: OutLayout, inputs: Collection[str]) -> None:
    """Remove what the mark lists (not this run's ``inputs``, real paths), then mark this run's
    outputs (before any of them exists)."""
    mark = layout.root / MARK
    for path in _marked(mark, layout.root):
        if os.path.realpath(path) in inputs:
            continue
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise DataError(f"{path}: cannot remove the previous run's output "
                            f"({os_problem(path, exc)})") from None
    try:
        write_json_atomic(mark, {"outputs": [p.relative_to(layout.root).as_posix()
                                             for p in layout.outputs()]})
    except OSError as exc:
        raise DataError(f"{layout.root}: cannot write in the --out folder "
                        f"({os_problem(mark, exc)})") from None


def _marked(mark: Path, root: Path) -> Sequence[Path]:
    """The files the last run listed; a mark that is not leakpipe's own JSON lists none."""
    try:
        listed = json.loads(mark.read_text()).get("outputs", [])
    except (OSError, ValueError, AttributeError):
        return []
    # only plain relative names below root: the mark never reaches outside the folder
    return [root / name for name in listed if isinstance(name, str)
            and not Path(name).is_absolute() and ".." not in Path(name).parts]
