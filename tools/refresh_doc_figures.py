"""Rewrite the docs' registered figures after their JSON changed (a re-run of the pipeline).

Every registered figure (docs/results/figures/*.yaml, tests/helpers_doc_figures.py) is rendered
twice: from its sources as git holds them at ``--before`` (the JSON the docs were written
against) and from the working tree's. Where the two differ and the doc holds the old text
(runs of whitespace matched loosely, as the check compares), the new text replaces it, token
by token, so the doc's line breaks stay where they were. What it cannot place is printed: a
figure whose old text the doc does not hold (edited by hand since), for a person to fix. The
words around the figures are not touched: read the diff, since a sentence that compares two
figures may need other words once they moved.

    python tools/refresh_doc_figures.py --before HEAD~1      # then: git diff docs README.md
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers_doc_figures import FigureError, registry, render  # noqa: E402


def _json_at(ref: str, path: str) -> object:
    text = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    return json.loads(text)


def _pattern(rendered: str) -> re.Pattern[str]:
    """The rendered text with any run of whitespace matching any run of whitespace."""
    return re.compile(r"\s+".join(re.escape(token) for token in rendered.split()))


def _replaced(match: re.Match[str], new: str) -> str:
    """``new`` in the place of the matched text, keeping the doc's own whitespace between
    tokens where the token counts agree (a line break stays a line break)."""
    gaps = re.findall(r"\s+", match.group(0))
    tokens = new.split()
    if len(tokens) != len(gaps) + 1:
        return new
    return "".join(t + g for t, g in zip(tokens, [*gaps, ""], strict=True))


def refresh(before: str) -> tuple[int, list[str]]:
    """Rewrite every doc; the number of figures rewritten and the problems, one line each."""
    changed, problems = 0, []
    for entry in registry():
        doc = ROOT / entry.doc
        text = doc.read_text()
        try:
            old_data = {a: _json_at(before, s) for a, s in entry.sources.items()}
        except subprocess.CalledProcessError:
            problems.append(f"{entry.doc}: a source is not in {before}; skipped")
            continue
        new_data = {a: json.loads((ROOT / s).read_text()) for a, s in entry.sources.items()}
        for template in entry.figures:
            try:
                old, new = render(template, old_data), render(template, new_data)
            except FigureError as exc:
                problems.append(f"{entry.doc}: {template[:60]!r}: {exc}")
                continue
            if old == new:
                continue
            pattern = _pattern(old)
            if not pattern.search(text):
                if not _pattern(new).search(text):
                    problems.append(f"{entry.doc}: the doc holds neither the old nor the new "
                                    f"text of {new[:80]!r}")
                continue
            text, n = pattern.subn(lambda m, new=new: _replaced(m, new), text)
            changed += n
        doc.write_text(text)
    return changed, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True,
                        help="the git revision whose JSON the docs were written against")
    args = parser.parse_args(argv)
    changed, problems = refresh(args.before)
    print(f"refresh_doc_figures: {changed} figures rewritten")
    for line in problems:
        print(f"  {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
