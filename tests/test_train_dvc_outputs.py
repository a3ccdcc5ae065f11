"""The train stage's DVC outputs come back together: model, metrics and plot data are all cached.

DVC deletes a stage's outputs before running it. When train then fails, `dvc checkout` restores
what dvc.lock records from the cache; an output declared ``cache: false`` is not in the cache,
so it used to stay missing while the model came back (issue #23, defect 6). Only the checkpoint
folder is uncached: it is the run's working state (``persist: true``), never deleted by DVC.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

DVC = Path(sys.executable).parent / "dvc"
DVC_CONFIG = "[core]\n    no_scm = True\n"
KINDS = ("outs", "metrics", "plots")
# The stand-in for stages/train.py: every declared output from input.txt, or fail (exit 1)
# after DVC removed the outputs, as a crashed train does.
FAKE_TRAIN = """import json, pathlib, sys
text = pathlib.Path("input.txt").read_text().strip()
if text == "fail":
    sys.exit("train failed")
for out in sys.argv[1:]:
    path = pathlib.Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix:
        path.write_text(json.dumps({"run": text}) + "\\n")
    else:                                          # a folder (the checkpoints)
        path.mkdir(exist_ok=True)
        (path / "run_id").write_text(text)
"""


def _train_stage() -> dict[str, Any]:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["train"]


def _outputs(stage: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """path -> its properties, over outs, metrics and plots."""
    found: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        for entry in stage.get(kind, []):
            if isinstance(entry, str):
                found[entry] = {}
            else:
                found.update({path: dict(props or {}) for path, props in entry.items()})
    return found


def test_every_train_output_but_the_checkpoint_folder_is_cached() -> None:
    outputs = _outputs(_train_stage())
    state = {path for path, props in outputs.items() if props.get("persist")}
    assert state == {"checkpoints/train"}
    uncached = sorted(p for p, props in outputs.items()
                      if p not in state and props.get("cache", True) is False)
    assert not uncached, f"declared cache: false in dvc.yaml's train stage: {uncached}"
    assert {"models/model.pt", "metrics/train.json", "plots/train/history.csv"} <= set(outputs)


def _dvc(root: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")}
    done = subprocess.run([str(DVC), *args], cwd=root, env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert (done.returncode == 0) == ok, f"dvc {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.slow
def test_dvc_checkout_after_a_failed_train_restores_every_output(tmp_path: Path) -> None:
    """The real train stage's outputs (the declarations as in dvc.yaml, a stand-in command)
    in a DVC project without git: repro, a failed repro, `dvc checkout`."""
    declared = _train_stage()
    outputs = _outputs(declared)
    stage = {"cmd": f"python fake_train.py {' '.join(outputs)}",
             "deps": ["fake_train.py", "input.txt"],
             **{kind: declared[kind] for kind in KINDS if kind in declared}}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}))
    (tmp_path / "fake_train.py").write_text(FAKE_TRAIN)
    (tmp_path / "input.txt").write_text("good\n")
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text(DVC_CONFIG)       # as `dvc init --no-scm`
    _dvc(tmp_path, "repro")
    files = [p for p in outputs if not outputs[p].get("persist")]
    good = {p: (tmp_path / p).read_bytes() for p in files}
    (tmp_path / "input.txt").write_text("fail\n")
    _dvc(tmp_path, "repro", ok=False)
    assert not [p for p in files if (tmp_path / p).exists()]     # DVC removed them first
    _dvc(tmp_path, "checkout", "--force")
    assert {p: (tmp_path / p).read_bytes() if (tmp_path / p).exists() else None
            for p in files} == good
