"""Each DVC stage's code as one small file: what stage `check` writes, and dvc.yaml's rewrite.

A stage's code is its script under stages/ and every leakpipe module that running it loads,
directly or not (an import inside a function counts), read statically (AST only). Listed as
deps module by module, these made dvc.yaml unreadable. Instead `check` writes one file per
stage, ``digests/<stage>.txt``, a line ``<sha256>  <path>`` per file of its code (as
``sha256sum`` writes them), and each stage lists its file as its one code dep: an edited module
changes the files of exactly the stages that import it, every other file keeps its bytes and
DVC leaves those stages alone.

- ``python tools/code_digests.py digests --out digests synth field ...``: what `check` runs
  after the params check, naming every other stage (``write`` keeps that list).
- ``python tools/code_digests.py write [--check]``: dvc.yaml's code declarations as they
  follow from its stages (each stage's digest file right after its script, no module files;
  `check`'s list); ``--check`` changes nothing, exit 1 when ``write`` would. ``make deps``
  runs ``write``, then ``dvc repro check``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "leakpipe"
CLI = f"{PACKAGE}.cli"  # its dispatch table imports every command, so no stage starts from it
THIS = "tools/code_digests.py"
STAGE_SCRIPT = re.compile(r"\bpython\s+(stages/\w+\.py)\b")
DIGESTS = "digests"
WRITER_DEPS = (PACKAGE, "stages", "tools")   # every module, script and this tool: its inputs


class DepsError(Exception):
    """Bad input: a one-line message naming the file or stage."""


# -- import closures ---------------------------------------------------------------------------
def module_file(name: str, root: Path = ROOT) -> Path | None:
    """`leakpipe.a.b` -> leakpipe/a/b.py or leakpipe/a/b/__init__.py; None if no such file."""
    if name.split(".")[0] != PACKAGE:
        return None
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _parse(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:   # one line naming the file, as for any bad input
        raise DepsError(f"{path}: line {exc.lineno}: {exc.msg}") from None


_NAMES: dict[tuple[Path, Path, int, int], frozenset[str]] = {}


def imported_names(path: Path, root: Path = ROOT) -> set[str]:
    """Every name an import statement anywhere in `path` (functions included) may load.

    `from a import b` yields both `a` and `a.b`: `b` counts when it is a submodule. Kept per
    file version (its modification time and size), since each stage's closure reads most
    modules again.
    """
    stat = path.stat()
    key = (path, root, stat.st_mtime_ns, stat.st_size)
    if key not in _NAMES:
        _NAMES[key] = frozenset(_imported_names(path, root))
    return set(_NAMES[key])


def _imported_names(path: Path, root: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: from the package `path` is in
                package = path.relative_to(root).with_suffix("").parts[:-1]
                parent = ".".join(package[: len(package) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _with_parents(name: str) -> Iterator[str]:
    """`a.b.c` -> a, a.b, a.b.c: importing a module runs its packages' __init__.py first."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


def import_closure(start: Iterable[str], root: Path = ROOT) -> set[Path]:
    """The package's module files that importing `start` loads, transitively."""
    todo = list(start)
    seen: set[Path] = set()
    while todo:
        for name in _with_parents(todo.pop()):
            path = module_file(name, root)
            if path is not None and path not in seen:
                seen.add(path)
                todo.extend(imported_names(path, root))
    return seen


def command_module(subcommand: str, root: Path = ROOT) -> str:
    """The module under leakpipe/commands whose `NAME` is `subcommand` (how cli.py dispatches)."""
    for path in sorted((root / PACKAGE / "commands").glob("*.py")):
        for node in _parse(path).body:
            if (isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "NAME" for t in node.targets)
                    and isinstance(node.value, ast.Constant) and node.value.value == subcommand):
                return f"{PACKAGE}.commands.{path.stem}"
    raise DepsError(f"no leakpipe/commands module has NAME = {subcommand!r}")


def entry_modules(script: Path, root: Path = ROOT) -> set[str]:
    """What a stage script runs: the command its `main([...])` call names, plus whatever else
    of the package it imports (leakpipe.cli left out, see CLI)."""
    entries = {name for name in imported_names(script, root)
               if name.split(".")[0] == PACKAGE and not name.startswith(CLI)}
    for node in ast.walk(_parse(script)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "main" and node.args and isinstance(node.args[0], ast.List)
                and node.args[0].elts and isinstance(node.args[0].elts[0], ast.Constant)):
            entries.add(command_module(node.args[0].elts[0].value, root))
    return entries


def required_files(script: str, root: Path = ROOT) -> set[str]:
    """Repo-relative files a stage's result depends on: its script and the import closure."""
    path = root / script
    if not path.is_file():
        raise DepsError(f"{script}: no such stage script")
    closure = import_closure(entry_modules(path, root), root)
    return {script} | {p.relative_to(root).as_posix() for p in closure}


# -- the stages of dvc.yaml --------------------------------------------------------------------
def _stages(text: str) -> dict:
    try:
        stages = (yaml.safe_load(text) or {}).get("stages")
    except yaml.YAMLError as exc:
        raise DepsError(f"dvc.yaml: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(stages, dict) or not stages:
        raise DepsError("dvc.yaml: no stages")
    return stages


def stage_scripts(text: str) -> dict[str, str]:
    """Every stage whose cmd runs `python stages/<name>.py` -> that script (this tool aside)."""
    found = {}
    for name, stage in _stages(text).items():
        scripts = [s for s in STAGE_SCRIPT.findall(str(stage.get("cmd", ""))) if s != THIS]
        if scripts:
            found[name] = scripts[0]
    return found


def writer_stage(text: str) -> str:
    """The stage that runs ``digests`` (`check`): it depends on every module itself."""
    writers = [name for name, stage in _stages(text).items()
               if THIS in str(stage.get("cmd", ""))]
    if len(writers) != 1:
        raise DepsError(f"dvc.yaml: {len(writers)} stages run {THIS}, expected one")
    return writers[0]


def digest_path(script: str) -> str:
    """stages/train.py -> digests/train.txt: the file of the stage that runs the script."""
    return f"{DIGESTS}/{Path(script).stem}.txt"


def digested_stages(text: str) -> dict[str, str]:
    """Stage -> script for every stage with a digest file: each script stage but the writer."""
    writer = writer_stage(text)
    return {name: script for name, script in stage_scripts(text).items() if name != writer}


# -- digests -----------------------------------------------------------------------------------
def digest_text(script: str, root: Path = ROOT) -> str:
    """One line per file of the stage's code, ``<sha256>  <path>``, in path order."""
    return "".join(f"{hashlib.sha256((root / name).read_bytes()).hexdigest()}  {name}\n"
                   for name in sorted(required_files(script, root)))


def listed_files(text: str) -> set[str]:
    """The paths a digest file lists."""
    return {line.split("  ", 1)[1] for line in text.splitlines() if "  " in line}


def write_digests(out: Path, scripts: Iterable[str], root: Path = ROOT) -> list[Path]:
    """``out`` holds exactly one digest file per script: every digest is computed first and
    the folder replaced whole, so a bad script leaves the previous folder as it was."""
    texts = {Path(digest_path(s)).name: digest_text(s, root) for s in scripts}
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, text in texts.items():
            (staging / name).write_text(text)
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / name for name in sorted(texts)]


# -- dvc.yaml: the declarations ----------------------------------------------------------------
def _blocks(lines: list[str]) -> list[tuple[str, int, int]]:
    """(stage, first line, end line) of each block under `stages:`, in file order; a block ends
    where the next stage or the next top-level key starts."""
    starts: list[tuple[str, int]] = []
    end = len(lines)
    inside = False
    for i, line in enumerate(lines):
        if line.startswith("stages:"):
            inside = True
        elif inside and line and not line.startswith((" ", "#")):
            end = i
            break
        elif inside and re.match(r"^  [\w-]+:", line):
            starts.append((line.split(":")[0].strip(), i))
    return [(name, first, starts[k + 1][1] if k + 1 < len(starts) else end)
            for k, (name, first) in enumerate(starts)]


def _item(line: str) -> str:
    """`      - path   # comment` -> `path`; '' for a line that is no list item."""
    text = line.split("#", 1)[0].strip()
    return text[2:].strip() if text.startswith("- ") else ""


def _declare_digest(block: list[str], stage: str, script: str) -> list[str]:
    """The stage's block without module-file deps and with its digest file declared once,
    right after its script (first in `deps:` when the script is not listed)."""
    digest = f"      - {digest_path(script)}"
    has_script = any(_item(line) == script for line in block)
    out: list[str] = []
    in_deps = placed = False
    for line in block:
        if re.match(r"^    \w", line):            # a key of the stage
            in_deps = line.strip().startswith("deps:")
            out.append(line)
            if in_deps and not has_script:
                out.append(digest)
                placed = True
            continue
        if in_deps and _item(line).startswith((f"{PACKAGE}/", f"{DIGESTS}/")):
            continue
        out.append(line)
        if in_deps and _item(line) == script and not placed:
            out.append(digest)
            placed = True
    if not placed:
        raise DepsError(f"dvc.yaml: stage {stage!r} has no `deps:` list")
    return out


def _digests_cmd(block: list[str], stage: str, names: list[str]) -> list[str]:
    """The writer's block with its ``digests`` cmd item naming exactly ``names``."""
    at = next((i for i, line in enumerate(block) if f"{THIS} digests" in line), None)
    if at is None or not re.match(r"^      (- >-|- python|  python)", block[at]):
        raise DepsError(f"dvc.yaml: stage {stage!r} needs `- python {THIS} digests ...` "
                        "as an item of its cmd list")
    first = at - 1 if block[at].startswith("        ") and block[at - 1].strip() == "- >-" else at
    end = at + 1
    while end < len(block) and block[end].startswith("        "):
        end += 1
    words = " ".join([f"python {THIS} digests --out {DIGESTS}", *names])
    lines = textwrap.wrap(words, 92, break_long_words=False, break_on_hyphens=False)  # 100 cols
    item = ["      - >-", *(f"        {line}" for line in lines)]
    return block[:first] + item + block[end:]


def render(text: str) -> str:
    """dvc.yaml's text with the code declarations as they follow from its stages: each digested
    stage's code is its digest file, and the writer's cmd names every digested stage's script.
    Every other line is kept as it is."""
    stages = digested_stages(text)
    writer = writer_stage(text)
    deps = [d for d in _stages(text)[writer].get("deps") or [] if isinstance(d, str)]
    missing = [d for d in WRITER_DEPS if d not in deps]
    if missing:
        raise DepsError(f"dvc.yaml: stage {writer!r} must list {', '.join(missing)} as deps")
    names = [Path(script).stem for script in dict.fromkeys(stages.values())]
    lines = text.splitlines()
    blocks = _blocks(lines)
    out = lines[: blocks[0][1]]
    for name, first, end in blocks:
        block = lines[first:end]
        if name == writer:
            block = _digests_cmd(block, name, names)
        elif name in stages:
            block = _declare_digest(block, name, stages[name])
        out += block
    out += lines[blocks[-1][2]:]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=THIS, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    digests = commands.add_parser("digests", help="write stages' code digest files")
    digests.add_argument("--out", type=Path, required=True, help="the folder (replaced whole)")
    digests.add_argument("scripts", nargs="+", metavar="NAME",
                         help="a script under stages/ (stages/NAME.py -> OUT/NAME.txt)")
    write = commands.add_parser("write", help="rewrite dvc.yaml's code declarations")
    write.add_argument("--dvc-yaml", type=Path, default=ROOT / "dvc.yaml")
    write.add_argument("--check", action="store_true",
                       help="change nothing; exit 1 when `write` would change dvc.yaml")
    args = parser.parse_args(argv)
    try:
        if args.command == "digests":
            written = write_digests(args.out, [f"stages/{name}.py" for name in args.scripts])
            print(f"{len(written)} stages' code digests in {args.out}")
            return 0
        path: Path = args.dvc_yaml
        if not path.is_file():
            raise DepsError(f"{path}: no such file")
        text = path.read_text()
        new = render(text)
        if new == text or args.check:
            print(f"{path}: code deps {'up to date' if new == text else 'stale: run `make deps`'}")
            return 0 if new == text else 1
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(new)
        os.replace(tmp, path)
        print(f"{path}: code deps rewritten")
        return 0
    except (DepsError, OSError) as exc:
        print(f"{THIS}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
