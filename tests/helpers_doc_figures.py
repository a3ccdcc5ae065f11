"""Every result figure a doc quotes, rendered from the committed JSON it comes from.

The registry is ``docs/results/figures/*.yaml``, one file per doc:

    doc: docs/results/performance.md
    sweep: true                     # every figure-like number must be registered or allowed
    sources:                        # aliases of git-tracked JSON files
      ev: benchmarks/results/evaluate.json
    figures:                        # the exact quoted text, figures as {expression|format}
      - "at {ev:ratios.median.ram_vs_ceiling|.2f}x the forward-only ceiling"
      - text: "| <name> | {cv:methods.<m>.roc_auc.mean|.3f} |"   # once per row of `for`
        for: [{m: cnn, name: CNN}, {m: svm, name: SVM}]
    allow:                          # figure-like text that is no result (a param, a version)
      - text: "Python 3.11"
        why: the interpreter make run installs into
    generated:                      # blocks another test renders from JSON, between markers
      - start: "<!-- recording-table:start -->"
        end: "<!-- recording-table:end -->"
        by: tests/test_readme_tables.py

An expression is arithmetic (``+ - * /``, parentheses, ``min max abs len sum round mean``) over
references ``alias:path``; a path is keys joined by ``.``, ``[3]`` for a list item, ``[*]`` for
every item of a list or value of a mapping, and ``['odd key']`` for a key with other
characters. A format is a Python format spec (``.3f``, ``+.2f``, ``,.0f``), ``s`` for a string,
or ``e0`` / ``e1`` (``1.3e-8``: mantissa digits, no exponent padding). A ``for`` row's values
replace ``<key>`` in the text before it is rendered. Docs are compared with runs of whitespace
collapsed, so line breaks do not matter. A figure whose JSON changes while the text stays
fails; so does a figure-like number (a decimal, a ratio such as 3.0x, a percentage) in a swept
doc that no entry covers (code spans and fenced blocks are not swept). Sources must be
git-tracked: a DVC-cached file is not in a fresh clone.

    python tests/helpers_doc_figures.py     # every problem, one line each
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "docs" / "results" / "figures"

SEGMENT = r"(?:[A-Za-z0-9_@/]+|\[\d+\]|\[\*\]|\['[^']*'\])"
REFERENCE = re.compile(rf"\b([A-Za-z_]\w*):({SEGMENT}(?:\.?{SEGMENT})*)")
PLACEHOLDER = re.compile(r"\{(?!\{)([^{}|]+)\|([^{}]*)\}")
# a decimal (0.871, 1.52), a ratio (3.0x) or a percentage (0.27 %, 55%); not an address
# or a version with more dots (127.0.0.1)
FIGURE = re.compile(r"(?<![\w.])(?:\d[\d,]*\.\d+(?:e-?\d+)?(?!\.?\d)x?|\d[\d,]*x\b"
                    r"|\d[\d,]*(?:\.\d+)? ?%)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min, "max": max, "abs": abs, "len": len, "sum": sum, "round": round,
    "mean": lambda xs: sum(xs) / len(xs)}
OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv}


class FigureError(ValueError):
    """A registry entry that cannot be rendered: a missing key, a bad expression or format."""


@dataclass(frozen=True)
class Allowed:
    text: str
    why: str


@dataclass(frozen=True)
class Generated:
    start: str
    end: str
    by: str


@dataclass(frozen=True)
class DocFigures:
    """One registry file: a doc, its sources, its figures and its allowed numbers."""

    path: Path
    doc: str
    sweep: bool
    sources: Mapping[str, str]
    figures: tuple[str, ...]
    allow: tuple[Allowed, ...]
    generated: tuple[Generated, ...] = ()


def load(path: Path) -> DocFigures:
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise FigureError(f"{path}: not YAML: {exc}") from None
    if not isinstance(raw, dict) or "doc" not in raw:
        raise FigureError(f"{path}: expected a mapping with the key 'doc'")
    allow = []
    for item in raw.get("allow") or []:
        if not isinstance(item, dict) or not item.get("text") or not item.get("why"):
            raise FigureError(f"{path}: every allow entry needs 'text' and 'why': {item!r}")
        allow.append(Allowed(str(item["text"]), str(item["why"])))
    generated = []
    for item in raw.get("generated") or []:
        if not isinstance(item, dict) or not all(item.get(k) for k in ("start", "end", "by")):
            raise FigureError(f"{path}: every generated entry needs 'start', 'end' and 'by'")
        generated.append(Generated(str(item["start"]), str(item["end"]), str(item["by"])))
    figures = [text for item in raw.get("figures") or [] for text in _expand(path, item)]
    return DocFigures(path=path, doc=str(raw["doc"]), sweep=bool(raw.get("sweep", False)),
                      sources=dict(raw.get("sources") or {}), figures=tuple(figures),
                      allow=tuple(allow), generated=tuple(generated))


def _expand(path: Path, item: Any) -> list[str]:
    """A template, or ``{text, for}``: the text once per row of ``for``, ``<key>`` replaced."""
    if isinstance(item, str):
        return [item]
    if not isinstance(item, dict) or not isinstance(item.get("text"), str) \
            or not isinstance(item.get("for"), list):
        raise FigureError(f"{path}: a figure is a string or a mapping with 'text' and 'for'")
    out = []
    for row in item["for"]:
        text = item["text"]
        for key, value in dict(row).items():
            text = text.replace(f"<{key}>", str(value))
        out.append(text)
    return out


def registry(folder: Path = REGISTRY) -> list[DocFigures]:
    return [load(path) for path in sorted(folder.glob("*.yaml"))]


def _segments(path: str) -> Iterator[str]:
    for match in re.finditer(SEGMENT, path):
        yield match.group(0)


def lookup(data: Any, path: str) -> Any:
    """The value at ``path`` in ``data``; ``[*]`` maps the rest of the path over a list's items
    or a mapping's values."""
    if not re.fullmatch(rf"{SEGMENT}(?:\.?{SEGMENT})*", path):
        raise FigureError(f"bad path {path!r}")
    return _walk(data, list(_segments(path)), path)


def _walk(value: Any, parts: Sequence[str], path: str) -> Any:
    for i, part in enumerate(parts):
        if part == "[*]":
            if not isinstance(value, (list, dict)):
                raise FigureError(f"{path}: [*] on a {type(value).__name__}")
            items = value.values() if isinstance(value, dict) else value
            return [_walk(item, parts[i + 1:], path) for item in items]
        key: Any = int(part[1:-1]) if re.fullmatch(r"\[\d+\]", part) else (
            part[2:-2] if part.startswith("['") else part)
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            raise FigureError(f"{path}: no {part} there") from None
    return value


def evaluate(expression: str, data: Mapping[str, Any]) -> Any:
    """``expression`` over the JSON documents ``data`` (alias -> parsed JSON)."""
    values: dict[str, Any] = {}

    def bind(match: re.Match[str]) -> str:
        alias, path = match.group(1), match.group(2)
        if alias not in data:
            raise FigureError(f"unknown source alias {alias!r} in {expression!r}")
        name = f"_v{len(values)}"
        values[name] = lookup(data[alias], path)
        return name

    source = REFERENCE.sub(bind, expression.strip())
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        raise FigureError(f"bad expression {expression!r}") from None
    return _eval(tree.body, values, expression)


def _eval(node: ast.AST, values: Mapping[str, Any], expression: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name) and node.id in values:
        return values[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](_eval(node.left, values, expression),
                                        _eval(node.right, values, expression))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, values, expression)
        return -value if isinstance(node.op, ast.USub) else value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in FUNCTIONS and not node.keywords):
        args = [_eval(arg, values, expression) for arg in node.args]
        return FUNCTIONS[node.func.id](*args)
    raise FigureError(f"{expression!r}: only arithmetic, references and "
                      f"{', '.join(FUNCTIONS)} are allowed")


def fmt(value: Any, spec: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if spec == "s":
            return str(value)
        raise FigureError(f"{value!r} is not a number (format {spec!r})")
    if isinstance(value, float) and not math.isfinite(value):
        raise FigureError(f"{value!r} is not finite")
    sci = re.fullmatch(r"e(\d)", spec)
    if sci:
        mantissa, exponent = f"{value:.{sci.group(1)}e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    try:
        return format(value, spec)
    except ValueError:
        raise FigureError(f"bad format {spec!r}") from None


def render(template: str, data: Mapping[str, Any]) -> str:
    """The doc text a registry entry stands for, its figures filled from ``data``."""
    text = PLACEHOLDER.sub(lambda m: fmt(evaluate(m.group(1), data), m.group(2).strip()),
                           template)
    return text.replace("{{", "{").replace("}}", "}")


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _spans(text: str, needle: str) -> Iterator[tuple[int, int]]:
    start = text.find(needle)
    while needle and start >= 0:
        yield start, start + len(needle)
        start = text.find(needle, start + 1)


def unchecked(text: str, covered: Sequence[tuple[int, int]]) -> list[str]:
    """Figure-like numbers in ``text`` outside code and outside every ``covered`` span."""
    skip = [m.span() for m in CODE.finditer(text)] + list(covered)
    found = []
    for match in FIGURE.finditer(text):
        a, b = match.span()
        if not any(lo <= a and b <= hi for lo, hi in skip):
            context = text[max(0, a - 40):b + 20]
            found.append(f"{match.group(0)!r} in '...{context}...'")
    return found


def tracked_files(repo: Path) -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True,
                         check=True).stdout
    return set(out.splitlines())


def check(entry: DocFigures, repo: Path = REPO, tracked: set[str] | None = None) -> list[str]:
    """Every problem of one registry file, one line each (empty: the doc agrees with its JSON)."""
    where = f"{entry.path.name} ({entry.doc})"
    doc_path = repo / entry.doc
    if not doc_path.is_file():
        return [f"{where}: the doc does not exist"]
    problems = []
    data = {}
    for alias, source in entry.sources.items():
        if tracked is not None and source not in tracked:
            problems.append(f"{where}: source {source} is not tracked by git (a fresh clone "
                            "lacks it)")
        try:
            data[alias] = json.loads((repo / source).read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"{where}: source {source}: {exc}")
    if problems:
        return problems
    text = normalise(doc_path.read_text())
    covered: list[tuple[int, int]] = []
    for template in entry.figures:
        try:
            rendered = normalise(render(template, data))
        except FigureError as exc:
            problems.append(f"{where}: {template!r}: {exc}")
            continue
        spans = list(_spans(text, rendered))
        if not spans:
            problems.append(f"{where}: not in the doc, as the JSON renders it: {rendered!r}")
        covered += spans
    for allowed in entry.allow:
        spans = list(_spans(text, normalise(allowed.text)))
        if not spans:
            problems.append(f"{where}: allowed text no longer in the doc: {allowed.text!r}")
        covered += spans
    for block in entry.generated:
        start, end = text.find(block.start), text.find(block.end)
        if start < 0 or end < start:
            problems.append(f"{where}: no block between {block.start!r} and {block.end!r} "
                            f"(rendered by {block.by})")
        else:
            covered.append((start, end + len(block.end)))
    if entry.sweep:
        problems += [f"{where}: unregistered figure {item}" for item in unchecked(text, covered)]
    return problems


def check_all(folder: Path = REGISTRY, repo: Path = REPO) -> list[str]:
    tracked = tracked_files(repo)
    return [problem for entry in registry(folder) for problem in check(entry, repo, tracked)]


if __name__ == "__main__":
    issues = check_all()
    print("\n".join(issues) or "every registered figure agrees with its JSON")
    sys.exit(1 if issues else 0)
