"""Argument and output helpers shared by the subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_PARAMS = Path("params.yaml")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=DEFAULT_PARAMS,
                        help="params file (default: params.yaml)")
