"""Every kind's card has per-condition rows: the logger_stats and fused cards get ship's test
recordings per pipe material / sensor / native rate from the manifest (the CNN's card has them
per clip from evaluate), through one function (``ship.registration.conditions_section``).
Real manifest and params files."""

from __future__ import annotations

from pathlib import Path

import yaml

from leakpipe.ship.registration import Shipped, conditions_section, plain_card
from tests.conftest import PARAMS


def _shipped(tmp_path: Path, source: Path) -> Shipped:
    raw = yaml.safe_load(PARAMS.read_text())
    raw["build"]["source"] = str(source)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    # 2 metal recordings (one leak called, one quiet called LEAK), 1 plastic leak missed;
    # a val row and an unusable test row take no part
    rows = ({"split": "test", "recording_id": "LEAK/a.wav", "truth": 1, "decision": "LEAK"},
            {"split": "test", "recording_id": "NORMAL/b.wav", "truth": 0, "decision": "LEAK"},
            {"split": "test", "recording_id": "LEAK/c.wav", "truth": 1, "decision": "NOLEAK"},
            {"split": "test", "recording_id": "LEAK/d.wav", "truth": 1, "decision": ""},
            {"split": "val", "recording_id": "LEAK/e.wav", "truth": 1, "decision": "NOLEAK"})
    return Shipped(kind="quiet_level", file=tmp_path / "x.pt", report={}, metrics={},
                   data_dir=tmp_path, cnn_card=None, params=params, sha256="0" * 64,
                   rows=rows)


def test_ship_test_recordings_are_tabled_per_condition(tmp_path: Path) -> None:
    (tmp_path / "manifest.csv").write_text(
        "path,class,group,material\nLEAK/a.wav,LEAK,s1,metal\nNORMAL/b.wav,NORMAL,s2,metal\n"
        "LEAK/c.wav,LEAK,s3,plastic\nLEAK/d.wav,LEAK,s4,plastic\nLEAK/e.wav,LEAK,s5,metal\n")
    section = conditions_section(_shipped(tmp_path, tmp_path / "manifest.csv"))
    assert section.startswith("## Per condition (test split)")
    assert "per recording" in section
    lines = section.splitlines()
    metal = next(line for line in lines if line.startswith("| metal"))
    plastic = next(line for line in lines if line.startswith("| plastic"))
    assert metal.startswith("| metal * | 2 (1 / 1) | 1.000 [")       # *: a few recordings
    assert metal.split("|")[4].strip().startswith("0.000 [")          # the quiet one: LEAK
    assert plastic.startswith("| plastic * | 1 (1 / 0) | 0.000 [")    # d.wav (no call): out
    assert "sensor" not in section                       # a column the manifest lacks


def test_without_a_manifest_the_card_says_so(tmp_path: Path) -> None:
    (tmp_path / "LEAK").mkdir()
    card = plain_card(_shipped(tmp_path, tmp_path), "A rule.")
    assert "## Per condition (test split)" in card
    assert "no per-condition figures" in card
