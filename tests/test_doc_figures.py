"""Every result figure the docs quote is its committed JSON, rendered.

The registry (docs/results/figures/*.yaml, one file per doc) names for each quoted figure its
JSON file, key path, transform and format (tests/helpers_doc_figures.py). A JSON figure that
changes while the text stays fails here, and so does a figure-like number in README.md,
docs/results/ or any docs/*.md page that no entry covers: a new figure has to say where it
comes from. No torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers_doc_figures import (
    REGISTRY,
    REPO,
    FigureError,
    check,
    check_all,
    evaluate,
    load,
    registry,
    render,
)


def test_every_registered_figure_agrees_with_its_committed_json() -> None:
    problems = check_all()
    assert problems == [], "\n".join(problems)


def test_readme_and_every_results_page_are_swept() -> None:
    swept = {entry.doc for entry in registry() if entry.sweep}
    pages = {str(p.relative_to(REPO)) for p in (REPO / "docs" / "results").glob("*.md")}
    assert "README.md" in swept
    assert pages and pages <= swept, f"results pages without a swept registry: {pages - swept}"


def test_every_docs_page_is_swept() -> None:
    """A docs page, new or old, has a swept registry file, so an unsourced figure on it fails."""
    swept = {entry.doc for entry in registry() if entry.sweep}
    pages = {str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")}
    assert pages, "no docs pages found"
    missing = pages - swept
    assert not missing, f"docs pages without a swept registry (docs/results/figures/): {missing}"


def _project(tmp_path: Path, text: str, auc: float = 0.8707, allow: str = "") -> Path:
    """A doc, its JSON and its registry in a scratch folder laid out like the repo."""
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / "cv.json").write_text(json.dumps(
        {"methods": {"cnn": {"roc_auc": {"mean": auc, "ci_low": 0.7441, "ci_high": 0.9619}}},
         "rounds": [{"fpr": 0.25}, {"fpr": 0.425}], "a": 1213.0, "b": 966.0, "p": 1.3e-8}))
    (tmp_path / "doc.md").write_text(text)
    folder = tmp_path / "figures"
    folder.mkdir(exist_ok=True)
    (folder / "doc.yaml").write_text(
        "doc: doc.md\nsweep: true\nsources:\n  cv: results/cv.json\nfigures:\n"
        '  - "CNN {cv:methods.cnn.roc_auc.mean|.3f} ({cv:methods.cnn.roc_auc.ci_low|.2f}-'
        '{cv:methods.cnn.roc_auc.ci_high|.2f})"\n' + allow)
    return folder / "doc.yaml"


TEXT = "Grouped CV: CNN 0.871\n(0.74-0.96) over 30 sites; `--folds 5`, ```\nx = 0.25\n```\n"


def test_a_changed_json_figure_fails_until_the_text_is_changed(tmp_path: Path) -> None:
    path = _project(tmp_path, TEXT)
    assert check(load(path), tmp_path) == []               # line breaks do not matter
    path = _project(tmp_path, TEXT, auc=0.8934)
    problems = check(load(path), tmp_path)
    assert "not in the doc, as the JSON renders it: 'CNN 0.893 (0.74-0.96)'" in problems[0]
    assert [p.split(" in ")[0].split("figure ")[1] for p in problems[1:]] == [
        "'0.871'", "'0.74'", "'0.96'"]                   # the stale text is unchecked now
    path = _project(tmp_path, TEXT.replace("0.871", "0.893"), auc=0.8934)
    assert check(load(path), tmp_path) == []


def test_an_unregistered_figure_fails_the_sweep_unless_allowed(tmp_path: Path) -> None:
    text = TEXT + "A new figure: 0.912 and 3.0x faster, 55 % of them.\n"
    problems = check(load(_project(tmp_path, text)), tmp_path)
    assert [p.split("unregistered figure ")[1].split(" in ")[0] for p in problems] == [
        "'0.912'", "'3.0x'", "'55 %'"]
    allow = ('allow:\n  - text: "0.912 and 3.0x faster, 55 %"\n    why: a test\n')
    assert check(load(_project(tmp_path, text, allow=allow)), tmp_path) == []
    stale = 'allow:\n  - text: "0.5 s long"\n    why: gone\n'
    (problem,) = check(load(_project(tmp_path, TEXT, allow=stale)), tmp_path)
    assert "allowed text no longer in the doc: '0.5 s long'" in problem


def test_a_source_git_does_not_track_is_refused(tmp_path: Path) -> None:
    path = _project(tmp_path, TEXT)
    (problem,) = check(load(path), tmp_path, tracked={"doc.md"})
    assert "source results/cv.json is not tracked by git" in problem
    assert check(load(path), tmp_path, tracked={"results/cv.json"}) == []


def test_expressions_transforms_and_formats() -> None:
    data = {"cv": {"rounds": [{"fpr": 0.25}, {"fpr": 0.425}], "a": 1213.0, "b": 966.0,
                   "p": 1.3e-8, "odd": {"a key (x)": 2}}}
    assert render("{cv:a / cv:b|.2f}x", data) == "1.26x"
    assert render("{max(cv:rounds[*].fpr) - cv:rounds[0].fpr|+.3f}", data) == "+0.175"
    assert render("p = {cv:p|e1}, {cv:odd.['a key (x)']|d} {{set}}", data) == "p = 1.3e-8, 2 {set}"
    assert render("{len(cv:rounds)|d} rounds, {mean(cv:rounds[*].fpr) * 100|.1f} %", data) \
        == "2 rounds, 33.8 %"
    for bad in ("cv:nothing", "cv:rounds[5].fpr", "other:a", "__import__('os')", "cv:a ** 2"):
        with pytest.raises(FigureError):
            evaluate(bad, data)
    with pytest.raises(FigureError):
        render("{cv:rounds|.2f}", data)                     # a list is no figure


def test_the_registry_folder_holds_only_loadable_files() -> None:
    files = sorted(REGISTRY.glob("*.yaml"))
    assert files and all(load(path).doc for path in files)
    assert len({load(path).doc for path in files}) == len(files), "one registry file per doc"


def test_rows_of_a_table_and_generated_blocks(tmp_path: Path) -> None:
    """``for`` repeats a row template; a block between markers another test renders counts as
    checked, and a missing block fails."""
    text = ("| CNN | 0.871 |\n| ROC | 0.25 |\n<!-- t:start -->\n| x | 0.999 |\n<!-- t:end -->\n")
    rows = ('  - text: "| <name> | {cv:<path>|<f>} |"\n    for:\n'
            '      - {name: CNN, path: methods.cnn.roc_auc.mean, f: .3f}\n'
            '      - {name: ROC, path: "rounds[0].fpr", f: .2f}\n')
    block = ('generated:\n  - start: "<!-- t:start -->"\n    end: "<!-- t:end -->"\n'
             '    by: a test\n')
    path = _project(tmp_path, text)
    path.write_text(path.read_text().split("figures:")[0] + "figures:\n" + rows + block)
    assert check(load(path), tmp_path) == []
    (tmp_path / "doc.md").write_text(text.replace("<!-- t:end -->", ""))
    problems = check(load(path), tmp_path)
    assert "no block between '<!-- t:start -->' and '<!-- t:end -->'" in problems[0]
    assert "unregistered figure '0.999'" in problems[1]
