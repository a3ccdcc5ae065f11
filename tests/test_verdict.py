"""The verdict a person reads and the numbers shown on one scale (``decision.verdict``): the
shown leak_prob reaches the shown threshold exactly when the model calls LEAK, whatever the
rounding; a shifted recording is UNCERTAIN with its reason and what to do; a row without a call
is UNUSABLE."""

from __future__ import annotations

import numpy as np
import pytest

from leakpipe.decision.calibration import Calibration
from leakpipe.decision.verdict import (
    CV_COMMAND,
    call_fields,
    counts_text,
    shown,
    verdict,
    verdict_counts,
    with_verdict,
)


@pytest.mark.parametrize("calibration", [Calibration(),
                                         Calibration("platt", 2.5, 0.75, 36, "")])
def test_the_shown_numbers_give_the_call_even_next_to_the_threshold(
        calibration: Calibration) -> None:
    """Raw scores a hair either side of the raw threshold: rounded naively, a NOLEAK's
    leak_prob would often tie the threshold at 4 digits; shown, never."""
    threshold = 0.37012345
    raw = threshold + np.concatenate([np.linspace(-2e-4, 2e-4, 801), [-1e-12, 0.0, 1e-12]])
    ties = 0
    for score in raw:
        call = call_fields(float(score), threshold, float(calibration.prob(score)),
                           float(calibration.prob(threshold)))
        assert call["threshold"] == round(float(calibration.prob(threshold)), 4)
        assert (call["leak_prob"] >= call["threshold"]) == (call["decision"] == "LEAK")
        assert call["decision"] == ("LEAK" if score >= threshold else "NOLEAK")
        assert abs(call["leak_prob"] - float(calibration.prob(score))) <= 1.5e-4
        ties += round(float(calibration.prob(score)), 4) == call["threshold"] \
            and score < threshold
    assert ties > 0                                   # the case shown() is there for


def test_shown_keeps_a_figure_off_the_threshold_as_rounded() -> None:
    assert shown(0.98971234, 0.51422335, True) == (0.9897, 0.5142)
    assert shown(0.51419, 0.51422335, False) == (0.5141, 0.5142)   # naively 0.5142 >= 0.5142
    assert shown(0.51422335, 0.51422335, True) == (0.5142, 0.5142)


def test_the_verdict_of_each_kind_of_row() -> None:
    assert verdict("LEAK", "in") == "LEAK" and verdict("NOLEAK", "unknown") == "NOLEAK"
    assert verdict("LEAK", "shifted") == verdict("NOLEAK", "shifted") == "UNCERTAIN"
    assert verdict("", "") == verdict("", "shifted") == "UNUSABLE"      # no call


def test_a_shifted_row_says_why_and_what_to_do() -> None:
    row = {"decision": "LEAK", "domain": "shifted", "notes": "zero-padded",
           "domain_reason": "level: +31 dB vs training -42..+34", "leak_prob": 0.9897}
    out = with_verdict(row)
    assert out["verdict"] == "UNCERTAIN" and out["decision"] == "LEAK"
    assert out["leak_prob"] == 0.9897                            # the model's answer, kept
    assert out["notes"].startswith("zero-padded; UNCERTAIN: unlike the training recordings "
                                   "(level: +31 dB vs training -42..+34); leak_prob is the "
                                   "model's answer under its training distribution")
    assert out["notes"].endswith(f"`{CV_COMMAND}`") and CV_COMMAND.startswith(
        "leakpipe cv --source ") and " --out " in CV_COMMAND
    kept = with_verdict({**row, "domain": "in", "domain_reason": ""})
    assert (kept["verdict"], kept["notes"]) == ("LEAK", "zero-padded")


def test_the_counts_name_the_uncertain_calls() -> None:
    rows = [with_verdict({"decision": d, "domain": dom, "notes": "", "domain_reason": "x"})
            for d, dom in (("LEAK", "in"), ("NOLEAK", "in"), ("LEAK", "shifted"),
                           ("NOLEAK", "shifted"), ("", ""))]
    counts = verdict_counts(rows)
    assert counts_text(counts) == ("1 LEAK, 1 NOLEAK, 2 UNCERTAIN (out of domain; 1 called "
                                   "LEAK by the model)")
    assert counts["UNUSABLE"] == 1
    assert counts_text(verdict_counts(rows[:2])) == "1 LEAK, 1 NOLEAK, 0 UNCERTAIN"


def test_the_notes_name_options_leakpipe_cv_takes() -> None:
    """The command a shifted row's notes give is one `leakpipe cv` parses."""
    import argparse

    from leakpipe.commands import cv

    parser = argparse.ArgumentParser()
    cv.add_arguments(parser)
    named = [word for word in CV_COMMAND.split() if word.startswith("--")]
    assert named == ["--source", "--out"]
    args = parser.parse_args(["--source", "labelled.csv", "--out", "cv_here"])
    assert (str(args.source), str(args.out)) == ("labelled.csv", "cv_here")
