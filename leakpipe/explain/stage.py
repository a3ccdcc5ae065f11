"""``run_explain``: `leakpipe explain REC... [--model PATH_OR_URI] --out DIR`.

Per recording ``DIR/<stem>.png`` (the kind's ``DetectorKind.explainer``: ``recording`` and
``figure`` for a cnn detector, ``stats`` and ``fused`` for those kinds) and
``DIR/<stem>.json`` (the same numbers), each written atomically (two recordings with one stem
get ``<stem>-2``, ...), and one line with the call as predict's row says it
(``figure.call_text``: the verdict, ``leak_prob`` and ``threshold`` on one scale, a shifted
recording's reason). The detector, its scoring rules, the runtime and the batch size come
from predict's own functions, so the unoccluded scores are predict's. A recording that cannot
be read gets one line naming it and its reason; the others are still explained, and the exit
code is then 3 (data).

``explain_leaks`` is `leakpipe predict --explain DIR`: the same for every recording predict's CSV
calls LEAK (``decision``, the model's call: UNCERTAIN recordings it calls LEAK too; the rows
kept by ``--resume`` included), after predict has written it.
"""

from __future__ import annotations

import csv
import io
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from leakpipe.allocator import retain_freed_memory
from leakpipe.audio.opening import unread_format
from leakpipe.constants import DECISION_NAMES
from leakpipe.detectors.interface import ExplainSetup, Rendered
from leakpipe.detectors.registry import kind_of, load_any_detector
from leakpipe.errors import DataError
from leakpipe.explain.occlusion import FILLS
from leakpipe.files import json_text, os_problem, write_bytes_atomic, write_text_atomic
from leakpipe.predict.inputs import Unusable, select_recordings
from leakpipe.predict.rows import STATUS_OK
from leakpipe.predict.run import resolve_model
from leakpipe.predict.target import check_folder
from leakpipe.runtime import make_runtime

log = logging.getLogger(__name__)

DPI = 110


def run_explain(paths: Sequence[Path], model: str, out: Path, params: Path, *,
                device: str = "auto", bands_per_group: int = 4, fill: str = "floor") -> int:
    """The whole command; returns the exit code (0, or 3 when a recording was unreadable)."""
    if fill not in FILLS:
        raise DataError(f"--fill: {fill!r} is not one of {list(FILLS)}")
    out = Path(out)
    check_folder(out, "--out")
    runtime = make_runtime(device, "auto", device_key="--device")
    retain_freed_memory()
    detector = load_any_detector(resolve_model(model))
    explain = kind_of(detector).explainer(detector, ExplainSetup(
        params=params, runtime=runtime, bands_per_group=bands_per_group, fill=fill))
    return _explain_each(paths, out, explain)


def _explain_each(paths: Sequence[Path], out: Path,
                  explain: Callable[[Path], Rendered]) -> int:
    """``DIR/<stem>.png`` and ``.json`` per recording, one line each. The recordings are
    predict's (``select_recordings``: a missing path or no recording at all is refused before
    anything is loaded), and so are the refusals: a format leakpipe does not read or a signal
    that fails a refused check is one ``UNUSABLE`` line and nothing explained (predict's
    ``unusable`` row); one that cannot be read is an ``error:`` line and the exit code 3."""
    stems: dict[str, int] = {}
    failed = 0
    for path in select_recordings(paths):
        try:
            if reason := unread_format(path):
                raise Unusable(reason)
            rendered = explain(path)
        except Unusable as exc:
            print(f"explain: {path}: UNUSABLE: {exc}; no leak call to explain")
            continue
        except DataError as exc:
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
            continue
        except OSError as exc:
            failed += 1
            print(f"error: {path}: {os_problem(path, exc)}", file=sys.stderr)
            continue
        stem = _unique(path.stem, stems)
        png = io.BytesIO()
        rendered.figure.savefig(png, format="png", dpi=DPI)
        out.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(out / f"{stem}.png", png.getvalue())
        write_text_atomic(out / f"{stem}.json", json_text(rendered.data))
        print(f"explain: {path}: {rendered.line} -> {out / stem}.png, .json")
    return 3 if failed else 0


def explain_leaks(predictions: Path, model: str, out: Path, params: Path, *,
                  device: str = "auto") -> int:
    """``run_explain`` (default band groups and fill) on the recordings the predict CSV
    ``predictions`` calls LEAK; 0 without any. The detector is loaded again, from the same
    ``model``: the explanation's unoccluded score is then the CSV's."""
    with Path(predictions).open(newline="") as handle:
        leaks = [Path(row["path"]) for row in csv.DictReader(handle)
                 if row["status"] == STATUS_OK and row["decision"] == DECISION_NAMES[1]]
    if not leaks:
        print(f"explain: no LEAK decision in {predictions}; nothing to explain")
        return 0
    print(f"explain: {len(leaks)} LEAK decisions in {predictions} -> {out}")
    return run_explain(leaks, model, out, params, device=device)


def _unique(stem: str, seen: dict[str, int]) -> str:
    """``stem``, or ``stem-2``, ``stem-3``, ... for the second, third recording so named."""
    seen[stem] = seen.get(stem, 0) + 1
    return stem if seen[stem] == 1 else f"{stem}-{seen[stem]}"
