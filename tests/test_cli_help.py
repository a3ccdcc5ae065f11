"""`leakpipe --help` tells the DVC stages from the tools, and a subcommand's --help lists its own
options only.

``leakpipe.cli.STAGE_COMMANDS`` is checked against dvc.yaml (which stages, in which order) and
stages/<stage>.py (which command each one runs), so a new stage cannot be listed as a tool.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from leakpipe.cli import STAGE_COMMANDS, main
from tests.test_dvc_deps import REPO


def _stage_command(script: Path) -> str:
    """The command a stage script runs: the first item of its ``main([...])`` list."""
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "main":
            first = node.args[0].elts[0]               # main(["<command>", *sys.argv[1:]])
            assert isinstance(first, ast.Constant)
            return str(first.value)
    raise AssertionError(f"{script}: no main([...]) call")


def test_stage_commands_are_dvc_yamls_stages_in_order() -> None:
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert list(STAGE_COMMANDS.values()) == list(stages)
    assert {stage: _stage_command(REPO / "stages" / f"{stage}.py") for stage in stages} == \
        {stage: command for command, stage in STAGE_COMMANDS.items()}


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_help_lists_the_stages_in_pipeline_order_then_the_tools(
        capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    stages_part, tools_part = text.split("\ntools (no stage runs them; you do):\n")
    assert "DVC stages, in pipeline order (`dvc repro` runs them" in stages_part

    def names(part: str) -> list[str]:
        return [line.split()[0] for line in part.splitlines()
                if line.startswith("  ") and not line.startswith("   ")]

    assert names(stages_part.split("by hand):\n")[1]) == list(STAGE_COMMANDS)
    tools = names(tools_part.split("\npositional arguments:")[0])
    assert tools == sorted(tools) and {"predict", "promote", "serve", "ui"} <= set(tools)
    assert not set(tools) & set(STAGE_COMMANDS)
    assert "(DVC stage `crossval`)" in stages_part               # cv runs stage crossval


def test_tune_actions_have_their_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    dashboard = _help(capsys, "tune", "dashboard")
    assert dashboard.startswith("usage: leakpipe tune dashboard ")
    assert "--port" in dashboard and "--study" in dashboard
    for option in ("--workers", "--train", "--dry-run", "--best"):   # the study's, apply's
        assert option not in dashboard, option
    apply = _help(capsys, "tune", "apply")
    assert "--dry-run" in apply and "--port" not in apply and "--workers" not in apply
    study = _help(capsys, "tune")
    assert "--workers" in study and "--port" not in study
