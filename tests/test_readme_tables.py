"""The recording-level table (README.md, docs/results/recording-level.md) is the committed JSON
it reports, rendered (benchmarks/recording_table.py): a figure that changes in `metrics/cv.json`
or `benchmarks/results/cv_scenarios.json` fails here until the table is rendered again."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _renderer():
    spec = importlib.util.spec_from_file_location("recording_table",
                                                  REPO / "benchmarks" / "recording_table.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_readme_table_is_rendered_from_the_committed_json() -> None:
    table = _renderer()
    assert [doc.relative_to(REPO).as_posix() for doc in table.DOCS] == [
        "README.md", "docs/results/recording-level.md"]
    for doc in table.DOCS:
        block = table.readme_block(doc.read_text())
        assert block == table.current(), (f"{doc.name}'s recording table differs from the JSON: "
                                          "run `python benchmarks/recording_table.py --write`")


def test_a_changed_figure_changes_the_table() -> None:
    table = _renderer()
    cv = json.loads(table.CV.read_text())
    before = table.render(cv, None)
    cv["methods"]["logger_stats"]["recording_roc_auc"]["mean"] += 0.0123
    assert table.render(cv, None) != before
