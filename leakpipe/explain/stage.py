"""``run_explain``: `leakpipe explain REC... [--model PATH_OR_URI] --out DIR`.

Per recording ``DIR/<stem>.png`` (``figure``; ``stats`` and ``fused`` for those kinds) and
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe.allocator import retain_freed_memory
from leakpipe.audio.opening import unread_format
from leakpipe.constants import DECISION_NAMES
from leakpipe.errors import DataError
from leakpipe.explain.figure import call_text, explanation_figure
from leakpipe.explain.occlusion import FILLS
from leakpipe.explain.recording import Explanation, explain_recording, to_json
from leakpipe.files import json_text, os_problem, write_bytes_atomic, write_text_atomic
from leakpipe.predict import resolve_model
from leakpipe.predict_inputs import Unusable, select_recordings
from leakpipe.predict_rows import STATUS_OK
from leakpipe.predict_rules import batch_budget, scoring_rules
from leakpipe.predict_scoring import clip_scoring
from leakpipe.predict_target import check_folder
from leakpipe.runtime import Runtime, make_runtime
from leakpipe.stats_detector import FusedDetector, StatsDetector, load_any_detector

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
    if isinstance(detector, StatsDetector):
        return _explain_stats(paths, detector, out)
    if isinstance(detector, FusedDetector):
        return _explain_fused(paths, detector, out, params, runtime)
    if bands_per_group > detector.features.n_mels:
        raise DataError(f"--bands-per-group: {bands_per_group} is more than the model's "
                        f"{detector.features.n_mels} mel bands")
    rules = scoring_rules(detector, params)
    net = detector.inference_model().to(runtime.device)
    budget = batch_budget(detector, rules, runtime)

    def explain(path: Path) -> Rendered:
        ex = explain_recording(path, detector, net, runtime=runtime, budget=budget,
                               min_fraction=rules.min_clip_fraction,
                               bands_per_group=bands_per_group, fill=fill, quality=rules.quality)
        return Rendered(explanation_figure(ex), to_json(ex),
                        f"{call_text(ex.shown)}; {_top(ex)}")

    return _explain_each(paths, out, explain)


def _explain_stats(paths: Sequence[Path], detector: StatsDetector, out: Path) -> int:
    """A logger_stats detector: per recording the statistics that moved its score."""
    from leakpipe.explain import stats

    def explain(path: Path) -> Rendered:
        ex = stats.explain_stats_recording(path, detector)
        top = next(iter(ex.contributions.items()))
        return Rendered(stats.stats_figure(ex), stats.to_json(ex),
                        f"{call_text(ex.call)}; most from {top[0]} ({top[1]:+.2f} to the "
                        "logit)")

    return _explain_each(paths, out, explain)


def _explain_fused(paths: Sequence[Path], detector: FusedDetector, out: Path, params: Path,
                   runtime: Runtime) -> int:
    """A fused detector: per recording what each part moved the call by, and the statistics
    that moved the statistics part."""
    from leakpipe.explain import fused

    scoring = clip_scoring(detector.cnn, scoring_rules(detector.cnn, params), runtime)

    def explain(path: Path) -> Rendered:
        ex = fused.explain_fused_recording(path, detector, scoring)
        return Rendered(fused.fused_figure(ex), fused.to_json(ex),
                        f"{call_text(ex.call)}; {_main_term(ex)}")

    return _explain_each(paths, out, explain)


@dataclass(frozen=True)
class Rendered:
    """One recording's explanation: its figure, its JSON and the summary line's middle."""

    figure: Any
    data: dict[str, Any]
    line: str


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


def _main_term(ex: Any) -> str:
    """The term of the stacked logit (a part's evidence, or the stacker's intercept) that
    pushed the call most the way it went, signed: what actually moved the score."""
    terms = {f"the {name} part": part["evidence"] for name, part in ex.parts.items()}
    terms["the stacker's intercept"] = ex.bias
    leak = ex.raw_score >= ex.raw_threshold
    name = max(terms, key=lambda k: terms[k] if leak else -terms[k])
    others = ", ".join(f"{k} {v:+.2f}" for k, v in terms.items() if k != name)
    return f"most from {name} ({terms[name]:+.2f} to the logit; {others})"


def _top(ex: Explanation) -> str:
    """The band group that most pushed the call the way it went."""
    side = ex.towards_leak if ex.decision == DECISION_NAMES[1] else ex.towards_noleak
    if not side:
        return "no band group pushed it that way"
    g = side[0]
    return f"most from {ex.groups[g].label} (leak_prob {ex.leak_prob_without(g):.4f} without it)"


def _unique(stem: str, seen: dict[str, int]) -> str:
    """``stem``, or ``stem-2``, ``stem-3``, ... for the second, third recording so named."""
    seen[stem] = seen.get(stem, 0) + 1
    return stem if seen[stem] == 1 else f"{stem}-{seen[stem]}"
