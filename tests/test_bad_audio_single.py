"""One bad entry at a time next to good recordings, through `leakpipe build` / `build`.

For every rejected case of ``CASES`` (tests/helpers_bad_audio.py) the command with
``build.on_error: fail`` (the 0 Hz header through `build` itself), the control without it, a
source without LEAK, ``quality.reject`` leaving a truncated file out, and listed entries that are
not files (folder source and manifest, `build` and `index`). test_bad_audio.py builds the whole
corpus once with ``skip``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from leakpipe.build import BuildFailed, build
from leakpipe.config import BuildConfig
from leakpipe.constants import EXIT_DATA
from leakpipe.index import index_recordings
from tests.helpers_bad_audio import (
    CASES,
    CLI_FAIL_CASES,
    RATE_ZERO,
    Case,
    copy_of,
    good_recordings,
    ids,
    leakpipe_build,
    no_partial_output,
    rows_by_recording,
    shown,
    write_case,
)

# -- on_error: fail ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("good") / "raw"
    good_recordings(root)
    return root


@pytest.mark.parametrize("case", CLI_FAIL_CASES, ids=ids(CLI_FAIL_CASES))
def test_rejected_file_fails_the_build(tmp_path: Path, good_root: Path, mlflow_store: str,
                                       tiny_build_cfg: BuildConfig, case: Case) -> None:
    root = copy_of(good_root, tmp_path)
    path = write_case(root, case)
    run = leakpipe_build(tmp_path, root, tiny_build_cfg, "fail")
    assert run.code == EXIT_DATA == 3
    assert "Traceback" not in run.stderr
    [error] = run.errors()
    assert f"first: {shown(path)}: " in error and case.says in error
    assert "build.on_error=fail" in error
    assert no_partial_output(run.out) == []  # no split files, no temporary files
    assert not run.report.exists()
    failed = json.loads(run.failed_report.read_text())
    assert [u["path"] for u in failed["unusable"]] == [str(path)]


def test_the_same_good_recordings_build(tmp_path: Path, good_root: Path, mlflow_store: str,
                                        tiny_build_cfg: BuildConfig) -> None:
    # the control for the test above: without the bad file, `fail` builds
    run = leakpipe_build(tmp_path, copy_of(good_root, tmp_path), tiny_build_cfg, "fail")
    assert run.code == 0, run.stderr
    assert len(rows_by_recording(run.out)) == 9


def test_source_without_leak_class(tmp_path: Path, good_root: Path, mlflow_store: str,
                                   tiny_build_cfg: BuildConfig) -> None:
    root = copy_of(good_root, tmp_path)
    for file in (root / "LEAK").iterdir():
        file.unlink()
    (root / "LEAK").rmdir()
    run = leakpipe_build(tmp_path, root, tiny_build_cfg, "skip")
    assert run.code == EXIT_DATA
    assert "Traceback" not in run.stderr
    [error] = run.errors()
    assert error.startswith(f"error: {root}: no LEAK recordings found")
    assert "['BACKGROUND', 'NORMAL']" in error
    assert no_partial_output(run.out) == [] and not run.report.exists()


TRUNCATED_CASES = [c for c in CASES if "truncated" in c.checks]


@pytest.mark.parametrize("case", TRUNCATED_CASES, ids=ids(TRUNCATED_CASES))
def test_truncated_in_reject_leaves_a_truncated_file_out(tmp_path: Path, good_root: Path,
                                                         mlflow_store: str,
                                                         tiny_build_cfg: BuildConfig,
                                                         case: Case) -> None:
    root = copy_of(good_root, tmp_path)
    path = write_case(root, case)
    quality = dataclasses.replace(tiny_build_cfg.quality, reject=("dead", "truncated"))
    run = leakpipe_build(tmp_path, root, dataclasses.replace(tiny_build_cfg, quality=quality),
                         "skip")
    assert run.code == 0, run.stderr
    report = json.loads(run.report.read_text())
    assert [u["path"] for u in report["unusable"]] == [str(path)]
    assert "truncated: header claims" in report["unusable"][0]["reason"]
    assert report["flagged"] == []


# -- listed entries that are not files: each with its reason, the same in build and index -------


ODD_ENTRIES: dict[str, tuple[Callable[[Path], None], str]] = {
    "LEAK/folder.wav": (lambda path: path.mkdir(), "is a directory"),
    "NORMAL/loop.wav": (lambda path: path.symlink_to(path.name), "symlink loop"),
    "BACKGROUND/dangling.wav": (lambda path: path.symlink_to("gone.wav"),
                                "broken symlink (points to gone.wav)"),
}


@pytest.mark.parametrize("listing", ["folder", "manifest"])
def test_entries_that_are_not_files_are_listed_with_their_reason(
        tmp_path: Path, good_root: Path, tiny_build_cfg: BuildConfig, listing: str) -> None:
    root = copy_of(good_root, tmp_path)
    expected = {}
    for rel, (make, says) in ODD_ENTRIES.items():
        make(root / rel)
        expected[rel] = says
    if listing == "manifest":
        expected["LEAK/gone.wav"] = "no such file"
        rels = [p.relative_to(good_root).as_posix() for p in sorted(good_root.rglob("*.wav"))]
        lines = [f"{rel},{rel.split('/')[0]},{Path(rel).stem}" for rel in [*rels, *expected]]
        (root / "manifest.csv").write_text("path,class,group\n" + "\n".join(lines) + "\n")
    cfg = dataclasses.replace(tiny_build_cfg, on_error="skip", workers=1)
    report = build(cfg, root, tmp_path / "processed", progress=False)
    reasons = {Path(u["path"]).relative_to(root).as_posix(): u["reason"] for u in report.unusable}
    assert reasons == {rel: f"{root / rel}: {says}" for rel, says in expected.items()}
    assert sum(sum(counts.values()) for counts in report.recordings.values()) == 9
    index = index_recordings(root)
    assert {e["path"]: e["error"] for e in index["recordings"] if e.get("error")} == expected


def test_fail_on_a_rate_of_zero(tmp_path: Path, good_root: Path,
                                tiny_build_cfg: BuildConfig) -> None:
    root = copy_of(good_root, tmp_path)
    path = write_case(root, RATE_ZERO)
    cfg = dataclasses.replace(tiny_build_cfg, on_error="fail", workers=1)
    with pytest.raises(BuildFailed) as info:
        build(cfg, root, tmp_path / "processed", progress=False)
    message = str(info.value)
    assert f"first: {path}: {RATE_ZERO.says}" in message and "\n" not in message
    assert [u["path"] for u in info.value.report.unusable] == [str(path)]
    assert no_partial_output(tmp_path / "processed") == []
