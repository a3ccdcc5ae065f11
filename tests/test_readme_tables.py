"""The recording-level table (README.md, docs/results/recording-level.md) is the committed JSON
it reports, rendered (benchmarks/studies/recording_table.py): a figure that changes in
`metrics/cv.json`, `benchmarks/results/cv_scenarios.json` or `seed_spread.json` fails here until
the table is rendered again."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _renderer():
    spec = importlib.util.spec_from_file_location(
        "recording_table", REPO / "benchmarks" / "studies" / "recording_table.py")
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
                                          "run `python benchmarks/studies/recording_table.py "
                                          "--write`")


def test_a_changed_figure_changes_the_table() -> None:
    table = _renderer()
    cv = json.loads(table.CV.read_text())
    before = table.render(cv, None)
    cv["methods"]["logger_stats"]["recording_roc_auc"]["mean"] += 0.0123
    assert table.render(cv, None) != before


def test_the_seed_spread_starts_from_the_committed_crossval_run() -> None:
    """seed_spread.json's first run is `metrics/cv.json` at the default seeds: a crossval
    output that changes fails here until benchmarks/studies/seed_spread.py runs again."""
    table = _renderer()
    cv = json.loads(table.CV.read_text())
    seeds = json.loads(table.SEEDS.read_text())
    first = seeds["runs"][0]
    assert first["source"] == "metrics/cv.json" and first["selected"] == cv["selected"]
    for method, figs in cv["methods"].items():
        assert first["methods"][method]["recording_roc_auc"]["mean"] == round(
            figs["recording_roc_auc"]["mean"], 4), (
            f"{method}: run `python benchmarks/studies/seed_spread.py`, then "
            "`python benchmarks/studies/recording_table.py --write`")
    values = [run["methods"]["fused"]["recording_roc_auc"]["mean"] for run in seeds["runs"]]
    assert seeds["spread"]["fused"]["recording_roc_auc"]["min"] == min(values)
    assert table.seed_line(seeds) in table.current()
