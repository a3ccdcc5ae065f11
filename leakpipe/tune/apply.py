"""`leakpipe tune apply`: write the best trial's values into params.yaml, comments kept.

params.yaml stays the one source of truth: tuned values reach training only through this
explicit step (or the printed ``dvc exp run -S ...`` line), so every change is visible in git.
The file is edited with ruamel.yaml's round-trip mode (comments, order and alignment kept),
re-checked by the strict loader, and replaced atomically.
"""

from __future__ import annotations

import io
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML

from leakpipe.config import load_section
from leakpipe.errors import ConfigError, DataError
from leakpipe.files import write_text_atomic

PARAMS_KEY = "params"        # best_params.yaml: {section: {key: value}}
APPLY_SECTIONS = ("model", "train")
YAML_WIDTH = 4096            # never re-wrap params.yaml's long commented lines
FLOAT_TAG = "tag:yaml.org,2002:float"

Values = dict[str, dict[str, Any]]
Change = tuple[str, Any, Any]  # "section.key", old, new


def read_best(path: Path) -> Values:
    """The ``params`` mapping of tuning/best_params.yaml."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no best params; run `leakpipe tune` (or `dvc repro tune`) "
                        "first") from None
    except yaml.YAMLError:
        raise DataError(f"{path}: not valid YAML") from None
    values = doc.get(PARAMS_KEY) if isinstance(doc, dict) else None
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        raise DataError(f"{path}: expected '{PARAMS_KEY}: {{section: {{key: value}}}}'")
    unknown = sorted(set(values) - set(APPLY_SECTIONS))
    if unknown:
        raise DataError(f"{path}: {PARAMS_KEY}.{unknown[0]}: not a section tune may set")
    return values


def yaml_scalar(value: Any) -> str:
    """A scalar as params.yaml (read by PyYAML, YAML 1.1) reads it back: 1e-05 -> 1.0e-05."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text
    return str(value)


def exp_run_line(values: Values) -> str:
    """The equivalent ``dvc exp run -S section.key=value ...`` command line."""
    flags = [f"-S {shlex.quote(f'{section}.{key}={yaml_scalar(value)}')}"
             for section, keys in values.items() for key, value in keys.items()]
    return " ".join(["dvc exp run", *flags])


def _round_trip_yaml() -> YAML:
    rt = YAML()
    rt.width = YAML_WIDTH
    rt.preserve_quotes = True
    rt.representer.add_representer(
        float, lambda rep, value: rep.represent_scalar(FLOAT_TAG, yaml_scalar(value)))
    return rt


def apply_params(params: Path, values: Values, *, dry_run: bool = False) -> list[Change]:
    """Set every value in params.yaml (unless ``dry_run``); returns the changes made."""
    rt = _round_trip_yaml()
    doc = rt.load(Path(params).read_text())
    changes = set_values(doc, values, params)
    if dry_run or not changes:
        return changes
    buf = io.StringIO()
    rt.dump(doc, buf)
    _write_checked(Path(params), buf.getvalue())
    return changes


def set_values(doc: Any, values: Values, source: Path) -> list[Change]:
    """Assign into the round-trip document; every key must already exist there."""
    changes = []
    for section, keys in values.items():
        for key, value in keys.items():
            block = doc.get(section) if isinstance(doc, Mapping) else None
            if not isinstance(block, Mapping) or key not in block:
                raise ConfigError(f"{source}: {section}.{key}: missing key (best params are "
                                  "from another params layout; re-run the study)")
            if block[key] != value:
                changes.append((f"{section}.{key}", block[key], value))
                block[key] = value
    return changes


def _write_checked(path: Path, text: str) -> None:
    """Check ``text`` with the strict loader (as a scratch copy), then write it over params.yaml
    atomically: a bad value leaves the user's file untouched."""
    with tempfile.TemporaryDirectory(prefix="leakpipe-apply-") as folder:
        scratch = Path(folder) / path.name
        scratch.write_text(text)
        try:
            for section in APPLY_SECTIONS:
                load_section(scratch, section)
        except ConfigError as exc:
            raise ConfigError(f"{path}: the tuned values are not valid params "
                              f"({str(exc).removeprefix(f'{scratch}: ')}); nothing was changed") \
                from None
    write_text_atomic(path, text)


def run_apply(params: Path, best: Path, *, dry_run: bool = False) -> int:
    """`leakpipe tune apply`: print each change (made, or with ``dry_run`` only shown) and the
    equivalent ``dvc exp run`` line; returns the exit code."""
    values = read_best(best)
    changes = apply_params(params, values, dry_run=dry_run)
    verb = "would change" if dry_run else "changed"
    for key, old, new in changes:
        print(f"{verb} {key}: {yaml_scalar(old)} -> {yaml_scalar(new)}")
    if not changes:
        print(f"{params} already holds the best values of {best}")
    print(f"equivalent experiment: {exp_run_line(values)}")
    return 0
