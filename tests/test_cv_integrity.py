"""`leakpipe cv --source` and its --out folder (issue #35): no recording in two folds, one line
for a bad --out, one run per folder, no stale result, --folds checked as cv.folds is.

Real WAV / FLAC files, real builds into real HDF5, a real MLflow store, real flock locks; every
run stops before its first fold, so no method is trained.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from leakpipe.cli import main
from leakpipe.config import ValidateConfig, load_section
from leakpipe.constants import SPLITS
from leakpipe.cv.folds import make_folds
from leakpipe.cv.outdir import MARK, OutLayout, claimed
from leakpipe.data.writer import SplitWriter
from leakpipe.errors import DataError
from leakpipe.validate.split_validation import cross_split_failures
from tests.helpers_detector import copied_store, restore_logging
from tests.helpers_h5 import SMALL_FEATURES, random_mel

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
RATE = 4096

logging_restored = pytest.fixture(restore_logging)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logging_restored: None) -> str:
    uri = copied_store(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


def _params(root: Path) -> Path:
    """The repo's params with 1 s clips at 4096 Hz and one build worker."""
    params = yaml.safe_load(PARAMS.read_text())
    params["build"].update(sample_rate=RATE, fmax=2048.0, clip_s=1.0, short_window=256,
                           short_hop=128, n_fft=256, hop_length=256, n_mels=16, workers=1,
                           clips_per_recording=2)
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _source(root: Path, n_sites: int = 12, classes: tuple[str, ...] = ("NOLEAK", "LEAK"),
            extra: tuple[str, ...] = ()) -> Path:
    """``n_sites`` sites of 2 PCM_16 recordings each, the class alternating by site; ``extra``
    rows are added to the manifest as they are."""
    rng = np.random.default_rng(0)
    rows = []
    for site in range(n_sites):
        label = classes[site % len(classes)]
        for k in range(2):
            rel = f"wav/{label}/site{site}_{k}.wav"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            sf.write(root / rel, 0.05 * rng.standard_normal(2 * RATE), RATE, subtype="PCM_16")
            rows.append(f"{rel},{label},site{site}")
    manifest = root / "manifest.csv"
    manifest.write_text("path,class,group\n" + "\n".join([*rows, *extra]) + "\n")
    return manifest


def _cv(root: Path, manifest: Path, *more: str) -> list[str]:
    return ["cv", "--source", str(manifest), "--params", str(_params(root)), "--out",
            str(root / "out"), "--no-progress", *more]


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    return lines[0]


# -- case 1: one recording in two folds ---------------------------------------------------------

def test_cv_source_refuses_one_file_listed_under_two_groups(
        tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _source(tmp_path, extra=("wav/./LEAK/site1_0.wav,LEAK,elsewhere",))
    assert main(_cv(tmp_path, manifest)) == 3
    error = _error(capsys)
    assert "'wav/LEAK/site1_0.wav' (LEAK, group site1)" in error
    assert "'wav/./LEAK/site1_0.wav' (LEAK, group elsewhere)" in error
    assert "one recording under two groups" in error
    assert not (tmp_path / "out" / "data").exists() and not (tmp_path / "out" / "work").exists()


def test_cv_source_checks_the_built_splits_before_any_fold(
        tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """FLAC copies of WAVs (other bytes, the same audio, so the same features) under new
    groups: the manifest reader cannot tell, the built splits' content check does."""
    manifest = _source(tmp_path)
    (tmp_path / "flac").mkdir()
    copies = []
    for site in range(0, 12, 2):
        samples, rate = sf.read(tmp_path / f"wav/NOLEAK/site{site}_0.wav", dtype="int16")
        sf.write(tmp_path / f"flac/copy{site}.flac", samples, rate, subtype="PCM_16")
        copies.append(f"flac/copy{site}.flac,NOLEAK,copy{site}")
    with manifest.open("a") as handle:
        handle.write("\n".join(copies) + "\n")
    assert main(_cv(tmp_path, manifest, "--folds", "3")) == 3
    error = _error(capsys)
    assert "no_duplicate_content" in error or "content_in_one_group" in error, error
    assert str(tmp_path / "out" / "data") in error
    assert (tmp_path / "out" / "build.json").is_file()            # built, then refused
    assert not (tmp_path / "out" / "work").exists()               # before any fold


def _split(path: Path, split: str, rows: list[tuple[np.ndarray, str, str]]) -> Path:
    with SplitWriter(path, split, SMALL_FEATURES, ("LEAK", "NOLEAK"), dtype="float16",
                     chunk_mb=0.01) as writer:
        for mel, rid, group in rows:
            writer.append(mel, 0 if rid.startswith("L") else 1, recording_id=rid, group=group)
    return path


@pytest.mark.parametrize(("copy_in", "failed"), [
    ("test", {"no_duplicate_content", "content_in_one_group"}),   # another split
    ("train", {"content_in_one_group"}),    # one split, two groups: folds could part them
    (None, set()),
])
def test_built_splits_with_one_content_under_two_groups_fail(
        tmp_path: Path, copy_in: str | None, failed: set[str]) -> None:
    rng = np.random.default_rng(0)
    mel = [random_mel(rng, 2) for _ in range(6)]
    rows = {"train": [(mel[0], "La", "s1"), (mel[1], "Nb", "s2")],
            "val": [(mel[2], "Lc", "s3"), (mel[3], "Nd", "s4")],
            "test": [(mel[4], "Le", "s5"), (mel[5], "Nf", "s6")]}
    if copy_in is not None:
        rows[copy_in].append((mel[0].copy(), "Lcopy", "s7"))
    paths = {s: _split(tmp_path / f"{s}.h5", s, rows[s]) for s in SPLITS}
    cfg: ValidateConfig = load_section(PARAMS, "validate")
    assert {c.check for c in cross_split_failures(paths, cfg)} == failed


# -- case 5: a bad --out, two runs into one --out ----------------------------------------------

@pytest.mark.parametrize(("out", "says"), [
    ("a-file", "exists and is not a folder (--out names a folder)"),
    ("a-file/below", "cannot create the --out folder"),
])
def test_an_out_that_cannot_be_a_folder_is_one_line(
        tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str], out: str,
        says: str) -> None:
    (tmp_path / "a-file").write_text("mine")
    manifest = _source(tmp_path, n_sites=2)
    code = main(["cv", "--source", str(manifest), "--params", str(_params(tmp_path)),
                 "--out", str(tmp_path / out), "--no-progress"])
    assert code == 3
    assert _error(capsys).startswith(f"error: {tmp_path / out}: {says}")
    assert (tmp_path / "a-file").read_text() == "mine"


def test_a_second_run_into_a_held_out_folder_refuses_at_once(
        tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _source(tmp_path)
    out = tmp_path / "out"
    with claimed(out) as layout:                       # the first run, mid-way
        layout.metrics.write_text("{}")
        assert main(_cv(tmp_path, manifest)) == 3
        assert _error(capsys) == (f"error: {out}: another leakpipe cv run holds this folder "
                                  "(--out); wait for it to end or choose another --out")
        assert layout.metrics.read_text() == "{}" and not layout.data.exists()
    with claimed(out):                                 # the lock went with the first run
        pass


# -- case 8: a failed re-run leaves no stale result ---------------------------------------------

def _previous_run(out: Path) -> OutLayout:
    """What an earlier run left: its outputs (marked by it), a finished fold, user files."""
    with claimed(out) as layout:
        for path in layout.outputs():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text('{"recordings": 55}')
        (layout.work / "fold-01").mkdir(parents=True)
        (layout.work / "fold-01" / "result.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    (out / "plots" / "mine.png").write_text("mine")
    return layout


def test_a_failed_rerun_leaves_no_stale_result_beside_its_build(
        tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]) -> None:
    layout = _previous_run(tmp_path / "out")
    manifest = _source(tmp_path, n_sites=6)
    assert main(_cv(tmp_path, manifest, "--folds", "7")) == 3       # 6 sites: no 7 folds
    assert "6 groups (sites) cannot fill 7 folds" in _error(capsys)
    assert json.loads(layout.build_report.read_text())["n_recordings"] == 12   # this run's
    for stale in (layout.metrics, layout.predictions, layout.root / "predictions_recordings.csv",
                  layout.plots_dir / "folds.csv",
                  layout.plots_dir / "folds.png", layout.build_report.with_name(
                      "build.failed.json")):
        assert not stale.exists(), stale
    assert (layout.root / "notes.txt").read_text() == "mine"
    assert (layout.plots_dir / "mine.png").read_text() == "mine"
    assert (layout.work / "fold-01" / "result.json").is_file()     # resume state is kept
    assert json.loads((layout.root / MARK).read_text())["outputs"][0] == "cv.json"


def test_the_splits_a_run_reads_from_its_out_folder_are_kept(tmp_path: Path) -> None:
    """`leakpipe cv --data-dir DIR/data --out DIR` after a --source run: its inputs stay."""
    layout = _previous_run(tmp_path / "out")
    inputs = [layout.data / f"{s}.h5" for s in SPLITS]
    with claimed(layout.root, inputs):
        assert all(p.is_file() for p in inputs)
        assert not layout.metrics.exists() and not layout.build_report.exists()


def test_files_in_an_unmarked_out_folder_are_never_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cv.json").write_text("a user's own")
    with claimed(out):
        pass
    assert (out / "cv.json").read_text() == "a user's own"
    (out / MARK).write_text('{"outputs": ["../outside.txt", "/etc/passwd"]}')
    (tmp_path / "outside.txt").write_text("kept")
    with claimed(out):
        pass
    assert (tmp_path / "outside.txt").read_text() == "kept"


# -- case 10: --folds 1; one class only ----------------------------------------------------------

def test_folds_below_two_are_refused_while_parsing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["cv", "--source", str(tmp_path), "--folds", "1", "--out", str(tmp_path / "out")])
    assert info.value.code == 2
    assert "argument --folds: must be >= 2, got 1 (the rule of cv.folds)" in \
        capsys.readouterr().err
    assert not (tmp_path / "out").exists()                        # nothing built


def test_recordings_of_one_class_only_say_what_to_add(
        tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _source(tmp_path, n_sites=6, classes=("LEAK",))
    assert main(_cv(tmp_path, manifest, "--folds", "3")) == 3
    error = _error(capsys)
    assert "sites per class {'LEAK': 6}" in error
    assert "add recordings of a non-leak class (e.g. NOLEAK, NORMAL)" in error
    assert "lower cv.folds" not in error                          # no advice that cannot help


@pytest.mark.parametrize(("labels", "add"), [(["NOLEAK", "NORMAL"] * 3, "add LEAK recordings"),
                                             (["LEAK"] * 6, "of a non-leak class")])
def test_one_side_only_is_refused_before_folds(labels: list[str], add: str) -> None:
    groups = [f"s{i}" for i in range(6)]
    with pytest.raises(DataError, match=add):
        make_folds(labels, groups, 3, 0.2, 0)


def test_a_fold_part_without_a_class_names_the_sites_per_class() -> None:
    labels = ["LEAK", "LEAK"] + ["NOLEAK"] * 8
    groups = ["a", "b"] + [f"n{i}" for i in range(8)]
    with pytest.raises(DataError, match=r"sites per class \{'LEAK': 2, 'not-LEAK': 8\}, and "
                                        r"each of the 2 folds needs sites of both"):
        make_folds(labels, groups, 2, 0.3, 0)
