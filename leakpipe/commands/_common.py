"""Argument and output helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

DEFAULT_PARAMS = Path("params.yaml")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def param_int(section: type, name: str, key: str) -> Callable[[str], int]:
    """argparse type of an option that stands in for params key ``key`` (field ``name`` of the
    section dataclass ``section``): an integer within that key's bounds, so a value the params
    check refuses is refused while the arguments are parsed, before any work."""
    from leakpipe.config.loading import bound_problem

    bounds = next(f.metadata for f in dataclasses.fields(section) if f.name == name)

    def parse(text: str) -> int:
        value = int(text)
        problem = bound_problem(value, bounds)
        if problem:
            raise argparse.ArgumentTypeError(f"{problem} (the rule of {key})")
        return value

    parse.__name__ = "int"   # argparse names the type in "invalid int value: 'x'"
    return parse


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=DEFAULT_PARAMS,
                        help="params file (default: params.yaml)")


def add_validated_arguments(parser: argparse.ArgumentParser) -> None:
    """``--validated STAMP`` (default reports/validated.json) or ``--unvalidated``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--validated", type=Path, default=Path("reports/validated.json"),
                       help="the stamp `validate` writes: refuse split files whose bytes it did "
                            "not pass (default: reports/validated.json)")
    group.add_argument("--unvalidated", action="store_true",
                       help="expert: skip that check (the MLflow run is tagged "
                            "leakpipe.unvalidated)")


def validated_stamp(args: argparse.Namespace) -> Path | None:
    """The stamp to check the splits against; None for ``--unvalidated``."""
    return None if args.unvalidated else args.validated
