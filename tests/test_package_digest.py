"""``code_digest.package_digest``: the key that keeps a resumable stage from reusing results that
other code computed (crossval's finished folds, tune's Optuna study)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import leakpipe
from leakpipe.code_digest import package_digest
from tests.conftest import REPO


def _copy(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the package under ``root`` that ``package_digest`` reads instead."""
    package = root / "leakpipe"
    shutil.copytree(REPO / "leakpipe", package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(leakpipe, "__file__", str(package / "__init__.py"))
    return package


def test_the_digest_follows_the_source_and_nothing_else(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    package = _copy(tmp_path, monkeypatch)
    first = package_digest()
    assert first == package_digest()                             # deterministic
    cache = package / "cv" / "__pycache__"
    cache.mkdir()
    (cache / "stage.cpython-311.pyc").write_bytes(b"\0" * 8)      # bytecode: not source
    (package / "notes.txt").write_text("not a module")
    assert package_digest() == first
    stage = package / "cv" / "stage.py"
    stage.write_text(stage.read_text() + "\n# changed\n")
    assert package_digest() != first
    stage.rename(package / "cv" / "renamed.py")                  # same bytes, another module
    changed = package_digest()
    (package / "cv" / "renamed.py").rename(stage)
    assert changed != package_digest()


def test_crossval_keys_its_work_folder_on_the_code(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Finished folds of other code are dropped, as those of other settings are."""
    from leakpipe.cv.stage import _open_work

    package = _copy(tmp_path / "code", monkeypatch)
    work = tmp_path / "work"
    _open_work(work, {"settings": 1, "code": package_digest()})
    (work / "fold-01").mkdir()
    (work / "fold-01" / "result.json").write_text("{}")
    _open_work(work, {"settings": 1, "code": package_digest()})
    assert (work / "fold-01" / "result.json").is_file()          # same code: resumed
    (package / "model.py").write_text((package / "model.py").read_text() + "\n# edit\n")
    _open_work(work, {"settings": 1, "code": package_digest()})
    assert not (work / "fold-01").exists()                       # other code: afresh


def test_tune_names_its_study_by_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage's own setup reads the real digest: an edit to a copy of the package (one tune
    does not even import) names another study; the unchanged copy, the same one."""
    from leakpipe.tune.driver import load_setup
    from tests.helpers_tune import make_workspace

    ws = make_workspace(tmp_path / "ws")
    package = _copy(tmp_path / "code", monkeypatch)
    name = load_setup(ws.params, ws.paths).name
    assert load_setup(ws.params, ws.paths).name == name
    serve = package / "serve" / "__init__.py"
    serve.write_text(serve.read_text() + "\n# edit\n")
    assert load_setup(ws.params, ws.paths).name != name
