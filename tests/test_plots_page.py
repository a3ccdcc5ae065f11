"""`leakpipe plots`: every DVC plot of this project on one page that fetches nothing.

`dvc plots show` loads Vega from a CDN; the offline page must neither load a script nor link
anything remote, and it must hold every plot dvc.yaml declares (the top-level ``plots:`` and
each stage's), read by DVC from the plot files committed with the repo.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from leakpipe.cli import main
from tests.conftest import REPO

REMOTE = ("http://", "https://", "//")


class _Page(HTMLParser):
    """The page's headings, images and every attribute that can fetch something."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []          # every src / href value
        self.images: list[str] = []
        self.headings: list[str] = []
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for key, value in attrs:
            if key in ("src", "href", "xlink:href") and value is not None:
                self.links.append(value)
                if tag == "img":
                    self.images.append(value)
        self._in_h2 = tag == "h2"

    def handle_endtag(self, tag: str) -> None:
        self._in_h2 = False

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.headings.append(data)


def _declared_plots(dvc_yaml: Path) -> list[str]:
    """The plots of dvc.yaml by the heading a person reads: a top-level plot by its id (its
    title, or its file), a stage's plot by its declared ``title`` (its file without one)."""
    spec = yaml.safe_load(dvc_yaml.read_text())
    names = [entry if isinstance(entry, str) else next(iter(entry))
             for entry in spec.get("plots") or []]
    for stage in spec["stages"].values():
        for entry in stage.get("plots") or []:
            path, props = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
            names.append((props or {}).get("title", path))
    return names


def _dvc_project(root: Path) -> Path:
    """``root`` made a DVC project (no git: the page needs only the workspace), analytics off
    so that nothing here contacts the network."""
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=root,
                   check=True, capture_output=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    config = root / ".dvc" / "config"            # `dvc init --no-scm` wrote a [core] section
    config.write_text(config.read_text().replace("[core]\n", "[core]\n    analytics = false\n"))
    return root


def _parse(page: Path) -> _Page:
    parsed = _Page()
    parsed.feed(page.read_text(encoding="utf-8"))
    return parsed


def _project(tmp_path: Path) -> Path:
    """This repository's plots (dvc.yaml, templates, committed plot files) in a DVC project."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("dvc.yaml", "params.yaml"):      # params: dvc.yaml interpolates ${...}
        shutil.copy(REPO / name, project / name)
    shutil.copytree(REPO / "plots", project / "plots")
    history = project / "plots" / "train" / "history.csv"
    if not history.is_file():     # a DVC-cached output: absent from a fresh clone until dvc pull
        history.write_text("epoch,train/loss,val/loss,train/lr,val/clip_f1\n"
                           "0,1.2,1.3,0.002,0.6\n1,0.9,1.1,0.001,0.7\n")
    shipped = project / "plots" / "ship" / "confusion.json"
    if not shipped.is_file():     # ship's output, in git from the next committed `dvc repro` on
        shipped.parent.mkdir(parents=True, exist_ok=True)
        shipped.write_text('[{"actual": "LEAK", "predicted": "LEAK"}, '
                           '{"actual": "NOLEAK", "predicted": "LEAK"}]')
    _dvc_project(project)
    shutil.copytree(REPO / ".dvc" / "plots", project / ".dvc" / "plots")   # custom templates
    shutil.copy(REPO / "pyproject.toml", project / "pyproject.toml")
    return project


def test_curves_have_a_colour_per_series_and_named_axes(tmp_path: Path) -> None:
    """A chart of two series in one colour told apart by dash, under an axis named `y`, was
    what the integer_x template drew: now a colour and a legend entry per series (revisions by
    dash), and the axis named in dvc.yaml."""
    from leakpipe.plots_page import dvc_plots_json

    shown = dvc_plots_json(_project(tmp_path), tmp_path / "scratch")
    for name, label in (("Train, loss per epoch", "loss"),
                        ("Train, learning rate per epoch", "learning rate")):
        spec = shown["data"][name][0]["content"]
        assert spec["encoding"]["color"]["field"] == "series", name
        assert spec["encoding"]["y"]["title"] == label, name
        series = {row.get("field", label) for row in spec["data"]["values"]}
        assert len(series) == (2 if label == "loss" else 1)
    folds = shown["data"]["plots/cv/folds.csv"][0]["content"]
    assert folds["mark"]["type"] == "point"             # independent folds: no line joins them


def test_the_page_holds_every_plot_of_this_project_and_fetches_nothing(tmp_path: Path) -> None:
    project = _project(tmp_path)
    out = tmp_path / "page"

    assert main(["plots", "--repo", str(project), "--out", str(out)]) == 0

    page = out / "index.html"
    assert "<h1>leakpipe: plots</h1>" in page.read_text(encoding="utf-8")   # the project's name
    text = page.read_text(encoding="utf-8")
    assert text.isascii()
    parsed = _parse(page)
    assert "script" not in parsed.tags and "link" not in parsed.tags
    assert not [link for link in parsed.links if link.startswith(REMOTE)]
    declared = _declared_plots(project / "dvc.yaml")
    assert sorted(parsed.headings) == sorted(declared)
    assert len(parsed.images) == len(declared)
    for uri in parsed.images:                     # each figure: an SVG that links nothing
        head, _, body = uri.partition(",")
        assert head == "data:image/svg+xml;base64"
        svg = base64.b64decode(body).decode("utf-8")
        assert "<path" in svg or "<rect" in svg
        assert 'href="http' not in svg and "<script" not in svg and "@import" not in svg


def test_missing_plot_files_are_left_out_and_images_are_embedded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plot whose stage has not run yet is a warning, not a failure; an image plot is
    embedded with its own type."""
    project = tmp_path / "project"
    (project / "plots").mkdir(parents=True)
    (project / "plots" / "curve.csv").write_text("step,loss\n0,1.0\n1,0.5\n2,0.25\n")
    shutil.copy(REPO / "plots" / "adapt" / "rounds.png", project / "plots" / "figure.png")
    (project / "dvc.yaml").write_text(
        "plots:\n"
        "  - Loss per step:\n      x: step\n      y:\n        plots/curve.csv: loss\n"
        "  - plots/figure.png\n"
        "  - plots/not_run_yet.csv\n")
    _dvc_project(project)
    out = tmp_path / "page"

    assert main(["plots", "--repo", str(project), "--out", str(out)]) == 0
    logged = capsys.readouterr().err             # `main` logs to stderr, one line per event

    parsed = _parse(out / "index.html")
    assert "<h1>project: plots</h1>" in (out / "index.html").read_text()   # no pyproject
    assert sorted(parsed.headings) == ["Loss per step", "plots/figure.png"]
    assert [uri.split(";")[0] for uri in parsed.images] == ["data:image/svg+xml",
                                                             "data:image/png"]
    assert "plot plots/not_run_yet.csv not loaded (FileNotFoundError)" in logged
    assert "rendering plot 2/2: plots/figure.png" in logged


def test_a_project_without_plot_data_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "dvc.yaml").write_text("plots:\n  - plots/not_run_yet.csv\n")
    _dvc_project(project)

    assert main(["plots", "--repo", str(project), "--out", str(tmp_path / "page")]) == 1

    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: no plots to render in ")
    assert not (tmp_path / "page").exists()


def _encodings(spec: dict) -> list[dict]:
    """Every ``encoding`` of a Vega-Lite spec, its layers' and facet spec's included."""
    found = [spec["encoding"]] if "encoding" in spec else []
    for part in spec.get("layer", []) + ([spec["spec"]] if "spec" in spec else []):
        found += _encodings(part)
    return found


def test_the_figures_read_as_a_person_expects(tmp_path: Path) -> None:
    """Confusion matrices with the actual class on the rows (as MLflow's), the baselines' bars
    with their intervals, a colour and legend per cross-validation method, whole rounds and
    epochs."""
    from leakpipe.plots_page import dvc_plots_json

    project = tmp_path / "project"
    project.mkdir()
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(REPO / name, project / name)
    shutil.copytree(REPO / "plots", project / "plots")
    _dvc_project(project)
    shutil.copytree(REPO / ".dvc" / "plots", project / ".dvc" / "plots")
    data = dvc_plots_json(project, tmp_path / "scratch")["data"]

    def encodings(name: str) -> list[dict]:
        return _encodings(data[name][0]["content"])

    confusion = encodings("plots/eval/confusion.json")
    assert any(e.get("y", {}).get("field") == "actual" and
               e.get("x", {}).get("field") == "predicted" for e in confusion)
    bars = encodings("plots/baselines/comparison.json")
    assert {"field": "ci_high"} in [e.get("x2") for e in bars]
    assert any(e.get("x", {}).get("field") == "ci_low" for e in bars)
    folds = encodings("plots/cv/folds.csv")
    assert any(e.get("color", {}).get("field") == "method" for e in folds)
    for name, axis in (("Shipped detector, test recordings, ROC", "fpr"),       # the shipped
                       ("Shipped detector, test recordings, precision-recall", "recall"),
                       ("Shipped detector, test recordings, observed leak share over leak_prob",
                        "predicted")):   # detector's own errors, beside evaluate's CNN's
        assert any(e.get("x", {}).get("field") == axis for e in encodings(name)), name
    assert any(e.get("shape", {}).get("field") == "selected" for e in folds)   # the shipped kind
    for name, axis in (("plots/adapt/rounds.csv", "round"),
                       ("Adapt, field check set per round (0 = before adaptation)", "round"),
                       ("plots/train/history.csv", "epoch"),
                       ("Train, loss per epoch", "epoch"),
                       ("Train, learning rate per epoch", "epoch")):
        assert any(e.get("x", {}).get("field") == axis and      # whole rounds / epochs, no 0.5
                   e["x"].get("type") == "ordinal" for e in encodings(name)), name
