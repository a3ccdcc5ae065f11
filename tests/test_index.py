"""Stage `index`: content hashes of the recordings; `dvc repro` rebuilds exactly on a change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from leakpipe.index import file_digest, index_recordings
from tests.conftest import REPO

BIN = Path(sys.executable).parent
DVC_CONFIG = "[core]\n    analytics = false\n"   # no usage reports from a test's repository
CLASSES = ("LEAK", "NORMAL", "BACKGROUND")


def write_recordings(root: Path, n_sites: int = 6, seconds: float = 3.0) -> list[str]:
    """One 8 kHz PCM_16 noise recording per class and site, and root/manifest.csv."""
    rng = np.random.default_rng(0)
    rows = []
    for site in range(n_sites):
        for label in CLASSES:
            rel = f"wav/{label}_{site}.wav"
            (root / "wav").mkdir(parents=True, exist_ok=True)
            level = 0.3 if label == "LEAK" else 0.05
            sf.write(root / rel, level * rng.standard_normal(int(seconds * 8000)), 8000,
                     subtype="PCM_16")
            rows.append(f"{rel},{label},site{site}")
    (root / "manifest.csv").write_text("path,class,group\n" + "\n".join(rows) + "\n")
    return [r.split(",")[0] for r in rows]


def rewrite_same_size_and_time(path: Path, seed: int) -> None:
    """New samples, same length (so the same byte size) and the old modification time."""
    stat = path.stat()
    n = sf.info(path).frames
    sf.write(path, 0.05 * np.random.default_rng(seed).standard_normal(n), 8000, subtype="PCM_16")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_index_lists_every_recording_with_its_content_hash(tmp_path: Path) -> None:
    rels = write_recordings(tmp_path)
    index = index_recordings(tmp_path / "manifest.csv", workers=2)
    assert [e["path"] for e in index["recordings"]] == rels
    first = index["recordings"][0]
    assert first["sha256"] == file_digest(tmp_path / rels[0])
    assert first["bytes"] == (tmp_path / rels[0]).stat().st_size
    assert index["manifest"]["sha256"] == file_digest(tmp_path / "manifest.csv")
    assert index_recordings(tmp_path) == index  # the folder holding the manifest: the same


def test_index_changes_with_content_only(tmp_path: Path) -> None:
    rels = write_recordings(tmp_path)
    before = index_recordings(tmp_path)
    (tmp_path / "wav" / "notes.txt").write_text("not listed")
    assert index_recordings(tmp_path) == before
    rewrite_same_size_and_time(tmp_path / rels[4], seed=9)
    after = index_recordings(tmp_path)
    changed = [a["path"] for a, b in zip(after["recordings"], before["recordings"], strict=True)
               if a != b]
    assert changed == [rels[4]]


def test_class_folders_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "LEAK").mkdir()
    sf.write(tmp_path / "LEAK" / "a.s1.wav", np.zeros(100), 8000)
    index = index_recordings(tmp_path)
    assert index["manifest"] is None and [e["path"] for e in index["recordings"]] == \
        ["LEAK/a.s1.wav"]
    (tmp_path / "manifest.csv").write_text("path,class,group\nLEAK/gone.wav,LEAK,g\n")
    [entry] = index_recordings(tmp_path)["recordings"]
    assert entry["sha256"] is None and entry["error"] == "no such file"  # as build says


# -- the real thing: dvc repro in a temporary git repository ---------------------------------


def _run(cmd: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "MLFLOW_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["DVC_NO_ANALYTICS"] = "1"              # no usage reports, `dvc init`'s included
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


@pytest.mark.slow
def test_dvc_rebuilds_when_a_listed_recording_changes(tmp_path: Path) -> None:
    data, repo = tmp_path / "field", tmp_path / "repo"
    rels = write_recordings(data)  # outside the repository: DVC sees only what `index` hashes
    repo.mkdir()
    for name in ("dvc.yaml", "params.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(REPO / name, repo / name)
    for folder in ("stages", "tools", "leakpipe"):
        shutil.copytree(REPO / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["build"].update(source=str(data / "manifest.csv"), workers=1)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run([*git, "init", "-q"], repo)
    _run([str(BIN / "dvc"), "init", "-q"], repo)
    (repo / ".dvc" / "config").write_text(DVC_CONFIG)     # as the project's own .dvc/config
    repro = [str(BIN / "dvc"), "repro", "build"]

    first = _run(repro, repo)
    assert "Running stage 'index'" in first and "Running stage 'build'" in first
    assert "Running stage 'synth'" not in first  # an external manifest: synth is not upstream

    unchanged = _run(repro, repo)
    assert "Running stage 'index'" in unchanged  # always re-hashed ...
    assert "Running stage 'build'" not in unchanged  # ... but nothing to rebuild

    rewrite_same_size_and_time(data / rels[3], seed=5)
    changed = _run(repro, repo)
    assert "Running stage 'build'" in changed
    index = json.loads((repo / "reports" / "recordings.json").read_text())
    assert index["recordings"][3]["sha256"] == file_digest(data / rels[3])
