"""Strict loading of params.yaml into the frozen section dataclasses.

Reading refuses what DVC refuses, so `leakpipe check` and DVC agree on the file: a file that is
not UTF-8, a key given twice in one mapping (PyYAML keeps the last, DVC refuses the file) and
an unknown top-level section. Loading rejects unknown keys, missing keys, wrong types,
non-finite floats (``leakpipe.config.fields``) and out-of-range values (the bounds of
``leakpipe.config.fields.num``) with a one-line ``ConfigError`` naming the file and the dotted
key, then runs the dataclass's own ``problems()`` checks.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from leakpipe.config.data import FEATURE_ADDED_DEFAULTS, FeatureConfig
from leakpipe.config.fields import NON_FINITE_OK
from leakpipe.config.sections import SECTIONS
from leakpipe.errors import ConfigError
from leakpipe.metric_names import current_name

__all__ = ["bound_problem", "from_mapping", "load_section", "read_params", "stored_features"]

log = logging.getLogger(__name__)


def read_params(path: Path | str) -> dict[str, Any]:
    """Read params.yaml as a mapping; a missing, unreadable or malformed file is a
    ``ConfigError``, and so is a duplicated key or an unknown section."""
    path = Path(path)
    raw = _parse_yaml(_read_text(path), path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown section; known: {sorted(SECTIONS)}")
    return raw


def _read_text(path: Path) -> str:
    """The file as UTF-8 text, the encoding DVC reads params files with."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte {data[exc.start]:#04x}); "
                          "save the file as UTF-8") from None


def _parse_yaml(text: str, path: Path) -> Any:
    """``yaml.safe_load`` that first refuses a key given twice in one mapping."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, "", path, set())
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise ConfigError(f"{path}: not valid YAML ({where})") from None
    finally:
        loader.dispose()


def _refuse_duplicate_keys(node: yaml.Node, prefix: str, path: Path, seen_nodes: set[int]) -> None:
    """Walk the composed document; a plain key twice in one mapping is a ``ConfigError`` naming
    the dotted key and both lines. Keys compare by resolved tag and text (``1`` and ``"1"``
    differ, as they do once constructed); an aliased node is walked once."""
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicate_keys(item, f"{prefix}[{i}]", path, seen_nodes)
    elif isinstance(node, yaml.MappingNode):
        first_line: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):  # a complex key fails construction
                continue
            key = f"{prefix}.{key_node.value}" if prefix else key_node.value
            line = key_node.start_mark.line + 1
            ident = (key_node.tag, key_node.value)
            if ident in first_line and key_node.tag != "tag:yaml.org,2002:merge":
                raise ConfigError(f"{path}: {key}: duplicate key on line {line} "
                                  f"(first on line {first_line[ident]})")
            first_line.setdefault(ident, line)
            _refuse_duplicate_keys(value_node, key, path, seen_nodes)


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
        finite = not f.metadata.get(NON_FINITE_OK, False)
        values[name] = _convert(raw[name], hints[name], key, source, finite)
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


def _convert(value: Any, hint: Any, key: str, source: str, finite: bool = True) -> Any:
    """``value`` as type ``hint``; with ``finite`` every float in it must be finite."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)

    def bad(expected: str) -> ConfigError:
        return _Mismatch(f"{source}: {key}: expected {expected}, got {value!r}", expected)

    if dataclasses.is_dataclass(hint):
        return from_mapping(hint, value, key, source)
    if hint is Any:  # checked by the owning dataclass's problems(); floats here too
        if finite:
            _refuse_non_finite(value, key, source)
        return value
    if origin is dict:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise bad("a mapping with string keys")
        return {k: _convert(v, args[1], f"{key}.{k}", source, finite) for k, v in value.items()}
    if origin is Literal:
        return _literal(value, args, key, source, bad)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        expected = []
        for option in inner:  # the first alternative that accepts the value
            try:
                return _convert(value, option, key, source, finite)
            except _Mismatch as exc:
                expected.append(exc.expected)
        raise bad(" or ".join(expected))
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise bad("a list")
        return tuple(_convert(v, args[0], f"{key}[{i}]", source, finite)
                     for i, v in enumerate(value))
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
        if finite:
            _refuse_non_finite(value, key, source)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    raise TypeError(f"unsupported config type {hint!r} for {key}")


def _literal(value: Any, args: tuple[Any, ...], key: str, source: str,
             bad: Callable[[str], ConfigError]) -> Any:
    """``value`` as one of ``args``; an older file's name of a figure (``val/file_f1``) is read
    under its current one (``val/clip_f1``) with a warning."""
    if isinstance(value, str) and value not in args and current_name(value) in args:
        log.warning("%s: %s: %r is the old name of %r (a \"file\" was a clip); read as %r",
                    source, key, value, current_name(value), current_name(value))
        return current_name(value)
    if value not in args:
        raise bad(f"one of {list(args)}")
    return value


def _refuse_non_finite(value: Any, key: str, source: str) -> None:
    """A ``ConfigError`` for the first .inf / .nan in ``value`` (walking lists and mappings);
    an integer too large for a float counts as infinite. Not a ``_Mismatch``: a union must not
    try its next alternative for a number of the right type."""
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _refuse_non_finite(item, f"{key}[{i}]", source)
    elif isinstance(value, Mapping):
        for k, item in value.items():
            _refuse_non_finite(item, f"{key}.{k}", source)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            ok = math.isfinite(value)
        except OverflowError:
            ok = False
        if not ok:
            raise ConfigError(f"{source}: {key}: must be a finite number, got {value!r}")


class _Mismatch(ConfigError):
    """A value of the wrong type; ``expected`` says what was wanted (unions list them all)."""

    def __init__(self, message: str, expected: str) -> None:
        super().__init__(message)
        self.expected = expected


def _check_bounds(value: Any, bounds: Mapping[str, float], key: str, source: str) -> None:
    problem = bound_problem(value, bounds)
    if problem:
        raise ConfigError(f"{source}: {key}: {problem}")


def bound_problem(value: Any, bounds: Mapping[str, float]) -> str:
    """How ``value`` breaks ``bounds`` (a ``num`` field's metadata: ``must be >= 2, got 1``),
    or "" when it does not; a command-line override is checked with the same rule."""
    if value is None or not bounds or isinstance(value, str):  # bounds are for the number
        return ""
    checks = {
        "ge": (lambda v, b: v >= b, ">="),
        "gt": (lambda v, b: v > b, ">"),
        "le": (lambda v, b: v <= b, "<="),
        "lt": (lambda v, b: v < b, "<"),
    }
    for name, bound in bounds.items():
        if name not in checks:  # a flag such as NON_FINITE_OK, not a bound
            continue
        ok, sign = checks[name]
        if not ok(value, bound):
            return f"must be {sign} {bound:g}, got {value!r}"
    return ""
