"""This project's DVC plots as one self-contained HTML page that opens without a network.

`dvc plots show` writes a page that loads Vega, Vega-Lite and vega-embed from a CDN, so on a
machine without internet access it is blank. Here DVC still does what it is good at (reading
the `plots:` definitions of dvc.yaml and the plot files, filling its templates): `dvc plots
show --json` hands over every plot as a Vega-Lite spec with its data inlined. vl-convert (a
Vega / Vega-Lite build bundled in a Python wheel, no browser, no network) renders each spec to
SVG, and the page embeds every figure as a base64 ``data:`` URI. Each SVG stays a separate
document that way, so the ids Vega numbers its clip paths with (``clip1``, ...) cannot collide
between figures, as they could inlined into one page. Image plots (PNG, SVG files declared
under ``plots:``) are embedded the same way. The page is static: no tooltips, and checkboxes
are shown ticked.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import mimetypes
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakpipe.errors import LeakpipeError
from leakpipe.files import write_text_atomic

log = logging.getLogger(__name__)
PAGE_NAME = "index.html"        # the name `dvc plots show` gives its page, in the same folder


@dataclass(frozen=True)
class Figure:
    """One rendered plot: its dvc.yaml id (a title or a file path), the image bytes and its
    heading (the declared title; the id when there is none)."""

    name: str
    mime: str
    data: bytes
    title: str = ""

    @property
    def heading(self) -> str:
        return self.title or self.name


def dvc_plots_json(repo: Path, scratch: Path, targets: Sequence[str] = ()) -> dict[str, Any]:
    """`dvc plots show --json` in ``repo``: ``{"data": {id: [entry, ...]}, "errors": [...]}``.

    Image plots are written under ``scratch`` (DVC's ``--out``) and named there by path. DVC
    runs as ``python -m dvc`` of this interpreter, so the venv's DVC answers whatever is on
    PATH, with analytics off: the command is meant for machines without a network.
    """
    cmd = [sys.executable, "-m", "dvc", "plots", "show", "--json", "--out", str(scratch),
           *targets]
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise LeakpipeError(f"dvc plots show failed in {repo}: "
                            f"{lines[-1] if lines else f'exit code {done.returncode}'}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise LeakpipeError(f"dvc plots show --json printed no JSON in {repo}: {exc}") from exc


def _vegalite_version(spec: dict[str, Any]) -> str | None:
    """The newest bundled Vega-Lite of the major version the spec's ``$schema`` names.

    DVC's templates are Vega-Lite 5 specs; a newer major may drop what they use. None (the
    bundle's default) when the schema names no version vl-convert has.
    """
    import vl_convert

    schema = str(spec.get("$schema", ""))
    major = schema.rsplit("/v", 1)[-1].split(".", 1)[0] if "/v" in schema else ""
    same = [v for v in vl_convert.get_vegalite_versions() if v.split(".", 1)[0] == major]
    return max(same, key=lambda v: tuple(int(p) for p in v.split("."))) if same else None


def _checked(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with every checkbox parameter ticked: a static figure has no checkbox to click,
    and what DVC's templates put behind one (the counts of the confusion matrix) is worth
    showing."""
    def ticked(param: dict[str, Any]) -> dict[str, Any]:
        bind = param.get("bind")               # a widget dict, or a string such as "scales"
        checkbox = isinstance(bind, dict) and bind.get("input") == "checkbox"
        return dict(param, value=True) if checkbox and "value" not in param else param

    params = spec.get("params")
    return dict(spec, params=[ticked(p) for p in params]) if params else spec


def render_entry(name: str, entry: dict[str, Any]) -> Figure:
    """One entry of the JSON's ``data[name]`` list as a figure (Vega-Lite to SVG, or the
    image file DVC wrote)."""
    kind = entry.get("type")
    if kind == "vega":
        import vl_convert

        spec = _checked(entry["content"])
        version = _vegalite_version(spec)
        kwargs = {"vl_version": version} if version else {}
        try:
            svg = vl_convert.vegalite_to_svg(spec, **kwargs)
        except ValueError as exc:
            # vl-convert's message is a heading line, the JS error, then a stack trace
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            reason = " ".join(lines[:2]) or type(exc).__name__
            raise LeakpipeError(f"plot {name!r}: {reason}") from exc
        return Figure(name, "image/svg+xml", svg.encode("utf-8"), _spec_title(spec))
    if kind == "image":
        path = Path(entry["url"])
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return Figure(name, mime, path.read_bytes())
    raise LeakpipeError(f"plot {name!r}: unknown plot type {kind!r} in dvc plots show --json")


def _spec_title(spec: dict[str, Any]) -> str:
    """The title dvc.yaml gave a plot (DVC puts it in the Vega-Lite spec), or ""."""
    title = spec.get("title")
    if isinstance(title, dict):
        title = title.get("text")
    if isinstance(title, list):
        title = " ".join(map(str, title))
    return str(title or "")


def render_page(figures: Sequence[Figure], title: str) -> str:
    """The HTML page: a heading and an ``<img>`` with a ``data:`` URI per figure, nothing
    fetched from anywhere."""
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}"
             "figure{margin:0 0 2.5em 0}img{max-width:100%}</style>",
             "</head>", "<body>", f"<h1>{html.escape(title)}</h1>"]
    for figure in figures:
        uri = f"data:{figure.mime};base64,{base64.b64encode(figure.data).decode('ascii')}"
        label = html.escape(figure.heading)
        source = (f"<figcaption>{html.escape(figure.name)}</figcaption>"
                  if figure.heading != figure.name else "")    # the file it draws
        parts += ["<figure>", f"<h2>{label}</h2>", f'<img alt="{label}" src="{uri}">',
                  *([source] if source else []), "</figure>"]
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def project_name(repo: Path) -> str:
    """The name a person knows the project by: ``[project] name`` of its pyproject.toml, else
    its folder's name."""
    import tomllib

    try:
        name = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["name"]
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return repo.resolve().name
    return str(name)


def write_plots_page(repo: Path, out_dir: Path, targets: Sequence[str] = ()) -> Path:
    """Render every DVC plot of ``repo`` (or only ``targets``) to ``out_dir/index.html``.

    A plot DVC could not load (its file missing because its stage has not run) is left out
    with a warning, so a partly run pipeline still gets a page; no plot at all is an error.
    """
    with tempfile.TemporaryDirectory(prefix="leakpipe-plots-") as scratch:
        shown = dvc_plots_json(repo, Path(scratch), targets)
        for error in shown.get("errors") or []:
            log.warning("plot %s not loaded (%s): %s", error.get("name", "?"),
                        error.get("type", "error"), error.get("msg", ""))
        entries = [(name, entry) for name, listed in (shown.get("data") or {}).items()
                   for entry in listed]
        if not entries:
            raise LeakpipeError(f"no plots to render in {repo}: run the pipeline first "
                                "(dvc repro), or name existing plot files")
        figures = []
        for i, (name, entry) in enumerate(entries, 1):
            log.info("rendering plot %d/%d: %s", i, len(entries), name)
            figures.append(render_entry(name, entry))
    page = out_dir / PAGE_NAME
    write_text_atomic(page, render_page(figures, f"{project_name(Path(repo))}: plots"))
    log.info("wrote %d plots to %s (offline: no scripts, no network)", len(figures), page)
    return page
