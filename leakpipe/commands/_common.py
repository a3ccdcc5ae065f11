"""Argument and output helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

DEFAULT_PARAMS = Path("params.yaml")


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=DEFAULT_PARAMS,
                        help="params file (default: params.yaml)")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary sibling and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
