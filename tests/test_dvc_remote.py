"""docs/scale-out.md, section "The data": a DVC remote shares the outputs between machines.

A tiny pipeline with the roles of the real one (`index` hashing recordings that a manifest
outside the repository names, `build` writing the splits and the stamp, `preload` the plan,
`train` a model), each stage a one-line shell command so that the test costs seconds; the
real stages run in tests/test_pipeline.py. The remote is a local folder, the other machine a
`git clone` into another folder of this one: the commands are those of the doc, in its order.
The recordings stay where the user keeps them: the remote holds the outputs only, and a
machine runs `dvc repro` only where it sees the recordings at the same path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
PULLED = ("data/processed", "reports/validated.json", "reports/preload.json")  # the doc's line
RECORDINGS = {"clips/a.wav": b"RIFF leak", "clips/b.wav": b"RIFF no leak"}

INDEX_PY = """\
import hashlib, json, sys
from pathlib import Path
manifest, out = Path(sys.argv[1]), Path(sys.argv[2])
paths = [line.split(",")[0] for line in manifest.read_text().splitlines()[1:]]
index = {p: hashlib.sha256((manifest.parent / p).read_bytes()).hexdigest() for p in paths}
out.parent.mkdir(exist_ok=True)
out.write_text(json.dumps(index, indent=1, sort_keys=True) + "\\n")
"""

DVC_YAML = """\
stages:
  index:
    cmd: python index.py {manifest} reports/recordings.json
    always_changed: true
    deps: [index.py, {manifest}]
    outs:
      - reports/recordings.json:
          cache: false
  build:
    cmd: >-
      mkdir -p data/processed && sed 's/^/mel /' reports/recordings.json > data/processed/train.h5
      && echo val > data/processed/val.h5 && sha256sum data/processed/*.h5 > reports/validated.json
    deps: [reports/recordings.json]
    outs: [data/processed, reports/validated.json]
  preload:
    cmd: sed 's/^/plan /' reports/validated.json > reports/preload.json
    deps: [data/processed, reports/validated.json]
    outs: [reports/preload.json]
  train:
    cmd: mkdir -p models && cat data/processed/train.h5 reports/preload.json > models/model.pt
    deps: [data/processed, reports/preload.json]
    outs: [models/model.pt]
"""


@dataclass(frozen=True)
class Machines:
    storage: Path            # the user's recordings: outside every repository, not in DVC
    remote: Path             # the DVC remote, a folder
    origin: Path             # machine A: ran the pipeline, pushed
    clone: Path              # machine B: cloned, pulled
    after_targeted_pull: frozenset[str]   # the clone's outputs after `dvc pull PULLED...`


def _env() -> dict[str, str]:
    """The venv first on PATH (the stages call `python`), no DVC variables of the outer run,
    DVC analytics off (nothing here may contact the network), a git identity."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", DVC_NO_ANALYTICS="1",
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return env


def _run(cwd: Path, *cmd: str) -> str:
    done = subprocess.run(list(cmd), cwd=cwd, env=_env(), capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _dvc(cwd: Path, *args: str) -> str:
    return _run(cwd, str(BIN / "dvc"), *args)


def _outputs(repo: Path) -> frozenset[str]:
    return frozenset(name for name in ("data/processed/train.h5", "data/processed/val.h5",
                                       "reports/validated.json", "reports/preload.json",
                                       "models/model.pt") if (repo / name).is_file())


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Machines:
    root = tmp_path_factory.mktemp("scale_out")
    storage, remote, origin, clone = (root / n for n in ("storage", "remote", "a", "b"))
    for name, data in RECORDINGS.items():
        (storage / name).parent.mkdir(parents=True, exist_ok=True)
        (storage / name).write_bytes(data)
    manifest = storage / "manifest.csv"
    manifest.write_text("path,class\nclips/a.wav,LEAK\nclips/b.wav,NOLEAK\n")
    origin.mkdir()
    (origin / "index.py").write_text(INDEX_PY)
    (origin / "dvc.yaml").write_text(DVC_YAML.format(manifest=manifest))
    _run(origin, "git", "init", "-q")
    _dvc(origin, "init", "-q")
    (origin / ".dvc" / "config").write_text("[core]\n    analytics = false\n")   # and in clones

    _dvc(origin, "repro")
    _run(origin, "git", "add", "-A")
    _run(origin, "git", "commit", "-qm", "the pipeline and its lock")

    # machine A (docs/scale-out.md section 2)
    _dvc(origin, "remote", "add", "-d", "store", str(remote))
    _run(origin, "git", "add", ".dvc/config")
    _run(origin, "git", "commit", "-qm", "DVC remote")
    _dvc(origin, "push")
    commit = _run(origin, "git", "rev-parse", "HEAD").strip()

    # machine B (section 3); `make test` is left out: it is this suite
    _run(root, "git", "clone", "-q", str(origin), str(clone))
    _run(clone, "git", "checkout", "-q", commit)
    _dvc(clone, "pull", *PULLED)
    targeted = _outputs(clone)
    _dvc(clone, "pull")
    return Machines(storage, remote, origin, clone, targeted)


def test_the_targeted_pull_fetches_exactly_the_splits_stamp_and_plan(machines: Machines) -> None:
    assert machines.after_targeted_pull == _outputs(machines.origin) - {"models/model.pt"}


def test_a_pull_gets_the_bytes_that_were_pushed(machines: Machines) -> None:
    assert _outputs(machines.clone) == _outputs(machines.origin) != frozenset()
    for name in _outputs(machines.origin):
        assert (machines.clone / name).read_bytes() == (machines.origin / name).read_bytes()


def test_the_clone_is_up_to_date_and_repro_reruns_only_index(machines: Machines) -> None:
    # `index` is always_changed, as in dvc.yaml: it re-hashes the recordings on every repro
    status = json.loads(_dvc(machines.clone, "status", "--json"))
    assert status == {"index": ["always changed"]}
    out = _dvc(machines.clone, "repro")
    assert [line for line in out.splitlines() if line.startswith("Running stage")] == [
        "Running stage 'index':"]
    for stage in ("build", "preload", "train"):
        assert f"Stage '{stage}' didn't change, skipping" in out


def test_the_recordings_stay_in_the_users_storage(machines: Machines) -> None:
    """The remote holds the outputs only: not one recording, nor the manifest, went there.
    A machine that does not see the storage at the path dvc.lock names sees `index`'s
    dependency as deleted, and `dvc repro` stops at `index`, having removed its output (a
    file git carries: `git checkout` brings it back)."""
    pushed = {path.read_bytes() for path in machines.remote.rglob("*") if path.is_file()}
    assert pushed and not pushed & {*RECORDINGS.values(),
                                    (machines.storage / "manifest.csv").read_bytes()}
    clone, index = machines.clone, machines.clone / "reports" / "recordings.json"
    away = machines.storage.with_name("storage.away")
    machines.storage.rename(away)
    try:
        status = json.loads(_dvc(clone, "status", "--json"))
        repro = subprocess.run([str(BIN / "dvc"), "repro"], cwd=clone, env=_env(),
                               capture_output=True, text=True, check=False, timeout=120)
        removed = not index.exists()
    finally:
        away.rename(machines.storage)
        _run(clone, "git", "checkout", "-q", "--", "reports/recordings.json")
    manifest = str(machines.storage / "manifest.csv")
    assert {"changed deps": {manifest: "deleted"}} in status["index"]
    assert set(status) == {"index"}
    assert repro.returncode != 0 and "Running stage" not in repro.stdout.replace(
        "Running stage 'index'", "")
    assert f"failed to reproduce 'index': dependency '{manifest}' does not exist" in (
        repro.stdout + repro.stderr)
    assert removed
