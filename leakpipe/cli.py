"""The `leakpipe` command: one subcommand per stage plus the tools around them."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

from leakpipe import __version__, commands
from leakpipe.errors import LeakpipeError
from leakpipe.logs import setup_logging

log = logging.getLogger("leakpipe")


def _command_modules() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__)
                   if not m.name.startswith("_"))
    return [importlib.import_module(f"{commands.__name__}.{name}") for name in names]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="leakpipe",
        description="Train and evaluate acoustic leak detectors (DVC stages + tools).")
    parser.add_argument("--version", action="version", version=f"leakpipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
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
