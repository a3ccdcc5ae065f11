"""The `leakpipe` command: one subcommand per stage plus the tools around them.

`leakpipe --help` lists the two apart: the DVC stages in pipeline order (what `dvc repro` runs;
by hand they are for one stage or an experiment outside DVC) and the tools, which no stage runs
(serving, promotion, browsing, studies). ``STAGE_COMMANDS`` says which is which;
tests/test_cli_help.py keeps it equal to dvc.yaml and stages/.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import shutil
import sys
import textwrap
from collections.abc import Sequence
from types import ModuleType

from leakpipe import __version__, commands
from leakpipe.errors import LeakpipeError
from leakpipe.logs import setup_logging

log = logging.getLogger("leakpipe")

# The DVC stages of dvc.yaml in pipeline order, by the command each one runs (stages/<stage>.py
# calls it): the stage's name where it differs from the command's.
STAGE_COMMANDS = {"check": "check", "synth": "synth", "field": "field", "index": "index",
                  "build": "build", "validate": "validate", "preload": "preload",
                  "train": "train", "evaluate": "evaluate", "baselines": "baselines",
                  "cv": "crossval", "ship": "ship", "tune": "tune", "adapt": "adapt"}


def _command_modules() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__)
                   if not m.name.startswith("_"))
    return [importlib.import_module(f"{commands.__name__}.{name}") for name in names]


def command_list(modules: Sequence[ModuleType], width: int | None = None) -> str:
    """The commands for `leakpipe --help`: the DVC stages in pipeline order, then the tools,
    each with its one-line help wrapped under a name column."""
    width = width or min(100, max(60, shutil.get_terminal_size().columns - 2))
    by_name = {m.NAME: m for m in modules}
    column = max(map(len, by_name)) + 4

    def entry(name: str, note: str = "") -> str:
        return textwrap.fill(by_name[name].HELP + note, width=width,
                             initial_indent=f"  {name:<{column - 2}}",
                             subsequent_indent=" " * column)

    stages = [entry(name, "" if stage == name else f" (DVC stage `{stage}`)")
              for name, stage in STAGE_COMMANDS.items()]
    tools = [entry(name) for name in sorted(set(by_name) - set(STAGE_COMMANDS))]
    return "\n".join([
        "DVC stages, in pipeline order (`dvc repro` runs them; `leakpipe STAGE` runs one by hand):",
        *stages, "", "tools (no stage runs them; you do):", *tools])


def build_parser() -> argparse.ArgumentParser:
    modules = _command_modules()
    parser = argparse.ArgumentParser(
        prog="leakpipe", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train and evaluate acoustic leak detectors.\n\n" + command_list(modules))
    parser.add_argument("--version", action="version", version=f"leakpipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                help="one of the above; `leakpipe COMMAND --help` for its options")
    for module in modules:
        p = sub.add_parser(module.NAME, description=module.HELP)
        p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        return int(args._run(args) or 0)
    except LeakpipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
