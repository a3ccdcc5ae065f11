"""Nothing listens beyond loopback by default, and nothing unpickles.

A model or checkpoint file may come from anywhere (a colleague, an MLflow store, a download):
``torch.load`` without ``weights_only=True``, ``pickle.load`` and friends would run whatever
code such a file carries. And a server bound to every interface exposes the tracking store
(params, metrics, artifacts, model files) to the whole network. Both are read from the source
(AST, nothing imported) and from the real argument parser, so a new server command or a new
loader cannot slip in.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from leakpipe.cli import build_parser
from leakpipe.tracking.server import server_command
from tests.conftest import REPO

PACKAGE = REPO / "leakpipe"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
ANY_INTERFACE = ("0.0.0.0", "::", "[::]")
HOST_OPTIONS = ("--host", "--bind", "--listen", "--address")
# calls that run code from a file's contents; torch.load is allowed with weights_only=True only
UNPICKLING_CALLS = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"),
                    ("cloudpickle", "load"), ("cloudpickle", "loads"), ("dill", "load"),
                    ("dill", "loads"), ("joblib", "load"), ("marshal", "loads"),
                    ("yaml", "load"), ("yaml", "unsafe_load"), ("yaml", "full_load"),
                    ("pyfunc", "load_model"), ("jit", "load")}


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(node: ast.expr) -> tuple[str, ...]:
    """``torch.load`` -> ("torch", "load"); anything else that is not a name chain -> ()."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return (node.id, *reversed(parts))
    return ()


def _keyword_is_true(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def unsafe_loads(path: Path) -> list[str]:
    """``file:line call`` for every call in ``path`` that may unpickle a file's contents."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        where = f"{path.name}:{node.lineno} {'.'.join(name)}"
        if name[-2:] == ("torch", "load"):
            unsafe = not _keyword_is_true(node, "weights_only")
        elif name[-2:] in (("np", "load"), ("numpy", "load")):
            unsafe = _keyword_is_true(node, "allow_pickle")
        else:
            unsafe = name[-2:] in UNPICKLING_CALLS
        if unsafe:
            found.append(where)
    return found


def test_the_package_never_unpickles() -> None:
    found = [hit for path in _sources() for hit in unsafe_loads(path)]
    assert not found, f"calls that may run code from a file: {found}"


def test_the_unpickling_check_finds_what_it_must(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import pickle, torch, numpy as np\n"
        "torch.load('a')\n"                                  # 2: no weights_only
        "torch.load('b', weights_only=False)\n"              # 3
        "torch.load('c', weights_only=True)\n"               # fine
        "pickle.loads(b'')\n"                                # 5
        "np.load('d', allow_pickle=True)\n"                  # 6
        "np.load('e')\n")                                    # fine
    lines = [int(hit.split(":")[1].split()[0]) for hit in unsafe_loads(sample)]
    assert lines == [2, 3, 5, 6]


def _subcommands(parser: argparse.ArgumentParser | None = None,
                 prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its name, nested ones too (``tune dashboard``)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in (parser or build_parser())._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(_subcommands(sub, f"{prefix}{name} "))
    return found


def test_every_server_option_defaults_to_loopback() -> None:
    servers = {}
    for name, parser in _subcommands().items():
        for action in parser._actions:
            if set(action.option_strings) & set(HOST_OPTIONS):
                servers[name] = action.default
    assert {"ui", "serve", "tune dashboard"} <= set(servers)   # the check sees every server
    assert {name: host for name, host in servers.items() if host not in LOOPBACK} == {}


def test_the_mlflow_server_is_started_on_the_host_it_was_given(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    args = build_parser().parse_args(["ui"])
    command = server_command("sqlite:///x.db", args.host, args.port)
    assert command[command.index("--host") + 1] == "127.0.0.1"


def test_no_source_binds_every_interface() -> None:
    """No string literal in the package, the Makefile or dvc.yaml names every interface."""
    hits = [f"{path.name}:{node.lineno}" for path in _sources()
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and node.value in ANY_INTERFACE]
    hits += [f"{path.name}: 0.0.0.0" for path in (REPO / "Makefile", REPO / "dvc.yaml")
             if "0.0.0.0" in path.read_text()]
    assert hits == []
