"""Advice that works for a network of slower loggers: a recording out of band is told to
cross-validate at its own rate (`leakpipe cv --sample-rate`), which builds the features there
(rebuilt at the model's rate its top bands would be empty again)."""

from __future__ import annotations

import pytest

from leakpipe.build import with_overrides
from leakpipe.cli import build_parser
from leakpipe.config import ConfigError, load_section
from leakpipe.decision.verdict import RATE_OPTION, with_verdict
from tests.conftest import PARAMS

BUILD = load_section(PARAMS, "build")


def test_the_rate_override_caps_fmax_and_refuses_what_the_features_cannot_use() -> None:
    slower = with_overrides(BUILD, None, 4096)
    assert (slower.sample_rate, slower.fmax) == (4096, 2048.0)
    assert with_overrides(BUILD, None, None) == BUILD
    assert with_overrides(BUILD, "folder", 16000).fmax == BUILD.fmax   # below Nyquist: kept
    for bad in (0, -8000, 100):
        with pytest.raises(ConfigError, match=rf"--sample-rate {bad}: "):
            with_overrides(BUILD, None, bad)


def test_cv_takes_the_rate_the_notes_name() -> None:
    option = RATE_OPTION.split()[0]
    args = build_parser().parse_args(["cv", "--source", "m.csv", "--out", "o", option, "4096"])
    assert args.sample_rate == 4096
    assert build_parser().parse_args(["cv"]).sample_rate is None


def _row(reason: str, band_hz: float) -> dict:
    return {"status": "ok", "decision": "LEAK", "domain": "shifted", "domain_reason": reason,
            "band_hz": band_hz, "notes": ""}


def test_an_out_of_band_recording_is_told_its_own_rate() -> None:
    band = with_verdict(_row("band: top 18 of 64 mel bands empty", 2048.0))
    assert band["verdict"] == "UNCERTAIN"
    assert band["notes"].endswith("--out <folder> --sample-rate <the loggers' rate, Hz>`")
    level = with_verdict(_row("level: +31 dB vs training -42..+34", 2048.0))
    assert "--sample-rate" not in level["notes"]             # the rate is not the problem
