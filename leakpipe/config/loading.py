"""Strict loading of params.yaml into the frozen section dataclasses.

Loading rejects unknown keys, missing keys, wrong types and out-of-range values (the bounds
of ``leakpipe.config.fields.num``) with a one-line ``ConfigError`` naming the file and the
dotted key, then runs the dataclass's own ``problems()`` checks.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from leakpipe.config.data import FEATURE_ADDED_DEFAULTS, FeatureConfig
from leakpipe.config.sections import SECTIONS
from leakpipe.errors import ConfigError

__all__ = ["from_mapping", "load_section", "read_params", "stored_features"]


def read_params(path: Path | str) -> dict[str, Any]:
    """Read params.yaml as a mapping; a missing or malformed file is a ``ConfigError``."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise ConfigError(f"{path}: not valid YAML ({where})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown section; known: {sorted(SECTIONS)}")
    return raw


def load_section(path: Path | str, name: str) -> Any:
    """Load one section of a params file into its frozen dataclass."""
    raw = read_params(path)
    if name not in SECTIONS:
        raise ConfigError(f"{path}: {name}: unknown section")
    if name not in raw:
        raise ConfigError(f"{path}: {name}: section missing")
    return from_mapping(SECTIONS[name], raw[name], name, str(path))


def from_mapping(cls: type, raw: Any, prefix: str, source: str = "<params>") -> Any:
    """Build dataclass ``cls`` from ``raw``; errors name ``source`` and the dotted key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: {prefix}: expected a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{source}: {prefix}.{unknown[0]}: unknown key; known: {sorted(fields)}")
    missing = [n for n in fields if n not in raw]
    if missing:
        raise ConfigError(f"{source}: {prefix}.{missing[0]}: missing key")
    values = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}"
        values[name] = _convert(raw[name], hints[name], key, source)
        _check_bounds(values[name], f.metadata, key, source)
    obj = cls(**values)
    for sub_key, problem in getattr(obj, "problems", lambda: [])():
        raise ConfigError(f"{source}: {prefix}.{sub_key}: {problem}")
    return obj


def stored_features(raw: Any, prefix: str, source: str = "<stored>") -> FeatureConfig:
    """The feature config stored in an HDF5 split or a model file (strict, as ``from_mapping``),
    a file written before a key of ``FEATURE_ADDED_DEFAULTS`` existed meaning its old value."""
    if isinstance(raw, Mapping):
        raw = {**FEATURE_ADDED_DEFAULTS, **raw}
    return from_mapping(FeatureConfig, raw, prefix, source)


def _convert(value: Any, hint: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)

    def bad(expected: str) -> ConfigError:
        return _Mismatch(f"{source}: {key}: expected {expected}, got {value!r}", expected)

    if dataclasses.is_dataclass(hint):
        return from_mapping(hint, value, key, source)
    if hint is Any:  # checked by the owning dataclass's problems()
        return value
    if origin is dict:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise bad("a mapping with string keys")
        return {k: _convert(v, args[1], f"{key}.{k}", source) for k, v in value.items()}
    if origin is Literal:
        if value not in args:
            raise bad(f"one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        expected = []
        for option in inner:  # the first alternative that accepts the value
            try:
                return _convert(value, option, key, source)
            except _Mismatch as exc:
                expected.append(exc.expected)
        raise bad(" or ".join(expected))
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise bad("a list")
        return tuple(_convert(v, args[0], f"{key}[{i}]", source) for i, v in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    raise TypeError(f"unsupported config type {hint!r} for {key}")


class _Mismatch(ConfigError):
    """A value of the wrong type; ``expected`` says what was wanted (unions list them all)."""

    def __init__(self, message: str, expected: str) -> None:
        super().__init__(message)
        self.expected = expected


def _check_bounds(value: Any, bounds: Mapping[str, float], key: str, source: str) -> None:
    if value is None or not bounds or isinstance(value, str):  # bounds are for the number
        return
    checks = {
        "ge": (lambda v, b: v >= b, ">="),
        "gt": (lambda v, b: v > b, ">"),
        "le": (lambda v, b: v <= b, "<="),
        "lt": (lambda v, b: v < b, "<"),
    }
    for name, bound in bounds.items():
        ok, sign = checks[name]
        if not ok(value, bound):
            raise ConfigError(f"{source}: {key}: must be {sign} {bound:g}, got {value!r}")
