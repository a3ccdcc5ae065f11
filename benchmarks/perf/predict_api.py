"""`leakpipe predict`'s functions that bench_build.py times, from the leakpipe it runs: today's
``leakpipe.predict`` package, or the one ``leakpipe/predict.py`` module of an older checkout
(``--baseline DIR``, a before / after).

Figures: docs/results/performance.md (through bench_build.py).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any


def predict_functions() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """(predict, scoring_rules, prepare)."""
    if importlib.util.find_spec("leakpipe.predict.clips") is not None:
        clips = importlib.import_module("leakpipe.predict.clips")
        rules = importlib.import_module("leakpipe.predict.rules")
        inputs = importlib.import_module("leakpipe.predict.inputs")
        return clips.predict, rules.scoring_rules, inputs.prepare
    old = importlib.import_module("leakpipe.predict")        # it loads leakpipe.predict_inputs
    return old.predict, old.scoring_rules, importlib.import_module(
        "leakpipe.predict_inputs").prepare
