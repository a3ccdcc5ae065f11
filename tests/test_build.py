"""Stage `build` on generated recordings: real WAV files in, real HDF5 splits out."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
import soundfile as sf

from leakpipe import tracking
from leakpipe.build import BuildFailed, build, select_classes
from leakpipe.cli import main
from leakpipe.data import open_split
from leakpipe.data.manifest import Recording, discover
from leakpipe.errors import DataError
from leakpipe.features.mel import clip_features
from leakpipe.files import file_sha256
from tests.helpers_close import assert_builds_close, assert_floats_close

CLASSES = ("LEAK", "NORMAL", "BACKGROUND")


def _tone(rng: np.random.Generator, label: str, seconds: float, sr: int) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    base = 0.05 * rng.standard_normal(t.size)
    if label == "LEAK":
        return base + 0.3 * rng.standard_normal(t.size)
    return base + 0.3 * np.sin(2 * np.pi * (100 if label == "NORMAL" else 50) * t)


def make_recordings(root: Path, n_sites: int = 6, per_class: int = 2, sr: int = 8000,
                    seconds: float = 1.5, manifest: bool = True) -> list[tuple[str, str, str]]:
    """WAVs under root/<CLASS>/ and (optionally) root/manifest.csv; returns the rows."""
    rng = np.random.default_rng(0)
    rows = []
    for site in range(n_sites):
        for label in CLASSES:
            for i in range(per_class):
                rel = f"{label}/s{site}_{i}.wav"
                (root / label).mkdir(parents=True, exist_ok=True)
                sf.write(root / rel, _tone(rng, label, seconds, sr).astype(np.float32) * 0.5, sr,
                         subtype="PCM_16")
                rows.append((rel, label, f"site{site}"))
    if manifest:
        lines = ["path,class,group,material"] + [f"{p},{c},{g},steel" for p, c, g in rows]
        (root / "manifest.csv").write_text("\n".join(lines) + "\n")
    return rows


@pytest.fixture
def recordings(tmp_path: Path) -> Path:
    root = tmp_path / "raw"
    make_recordings(root)
    return root


def test_build_writes_three_disjoint_splits(tmp_path: Path, recordings: Path,
                                            tiny_build_cfg) -> None:
    out = tmp_path / "processed"
    report = build(tiny_build_cfg, recordings, out, progress=False)
    assert report.class_names == ("BACKGROUND", "LEAK", "NORMAL")
    seen_ids, seen_groups, total = set(), set(), 0
    for split in ("train", "val", "test"):
        with open_split(out / f"{split}.h5") as reader:
            assert reader.mel.shape[1:] == tiny_build_cfg.features.segment_shape
            assert reader.n_files == 2 * sum(report.recordings[split].values())
            ids, groups = set(reader.recording_ids), set(reader.groups)
            assert not ids & seen_ids and not groups & seen_groups
            seen_ids |= ids
            seen_groups |= groups
            total += reader.n_files
            assert reader.leak_index == 1
    assert total == 6 * 3 * 2 * 2
    assert sorted(p.name for p in out.iterdir()) == ["test.h5", "train.h5", "val.h5"]


def test_rows_equal_features_of_the_recording(tmp_path: Path, recordings: Path,
                                              tiny_build_cfg) -> None:
    from leakpipe.audio.io import load_clips

    out = tmp_path / "processed"
    build(tiny_build_cfg, recordings, out, progress=False)
    with open_split(out / "train.h5") as reader:
        rid = reader.recording_ids[0]
        clips = load_clips(recordings / rid, reader.features, 2, 0.5)
        expected = clip_features(clips, reader.features).astype(np.float16)
        # build computes under one BLAS thread, this process under its default: float32
        # rounding apart, so a stored float16 may round to the neighbouring value
        assert_floats_close(reader.mel[0:2], expected, rid)


def test_two_workers_give_the_same_files(tmp_path: Path, recordings: Path,
                                         tiny_build_cfg) -> None:
    one = build(tiny_build_cfg, recordings, tmp_path / "w1", progress=False)
    two = build(dataclasses.replace(tiny_build_cfg, workers=2), recordings, tmp_path / "w2",
                progress=False)
    # ids, labels and layout exactly; the mel of a pool process within float32 rounding of
    # this one's (another process may sum in another order: equal bytes are not promised)
    assert_builds_close(tmp_path / "w2", tmp_path / "w1")
    assert one.recordings == two.recordings


def test_class_folders_without_manifest(tmp_path: Path, tiny_build_cfg) -> None:
    root = tmp_path / "raw"
    make_recordings(root, manifest=False)
    recs = discover(root, group_by="file")
    assert len(recs) == 36 and {r.label for r in recs} == set(CLASSES)
    assert recs[0].group == recs[0].recording_id  # each recording is its own group
    assert discover(root)[0].group == "s0_0"       # default: the recording stem
    report = build(tiny_build_cfg, root, tmp_path / "out", progress=False)
    assert sum(report.clips.values()) == 72


def _break(root: Path) -> None:
    (root / "LEAK" / "s0_0.wav").write_bytes(b"")                # empty
    (root / "NORMAL" / "s1_0.wav").write_text("hello, not audio")  # non-audio
    wav = (root / "BACKGROUND" / "s2_0.wav").read_bytes()
    (root / "BACKGROUND" / "s2_0.wav").write_bytes(wav[:60])     # header only, tiny


def test_on_error_fail_lists_files_and_leaves_no_output(tmp_path: Path, recordings: Path,
                                                       tiny_build_cfg) -> None:
    _break(recordings)
    out = tmp_path / "processed"
    with pytest.raises(BuildFailed) as info:
        build(tiny_build_cfg, recordings, out, progress=False)
    reasons = [u["path"] for u in info.value.report.unusable]
    assert sorted(Path(p).name for p in reasons) == ["s0_0.wav", "s1_0.wav", "s2_0.wav"]
    assert not out.exists() or list(out.iterdir()) == []


def test_on_error_skip_builds_the_rest(tmp_path: Path, recordings: Path,
                                       tiny_build_cfg) -> None:
    _break(recordings)
    cfg = dataclasses.replace(tiny_build_cfg, on_error="skip")
    report = build(cfg, recordings, tmp_path / "processed", progress=False)
    assert len(report.unusable) == 3
    assert sum(sum(c.values()) for c in report.recordings.values()) == 36 - 3


def test_cli_failure_writes_failed_report_only(tmp_path: Path, recordings: Path,
                                               mlflow_store: str, capsys) -> None:
    _break(recordings)
    params = tmp_path / "params.yaml"
    text = (Path(__file__).resolve().parents[1] / "params.yaml").read_text()
    params.write_text(text.replace("workers: 2 ", "workers: 1 "))
    report = tmp_path / "reports" / "build.json"
    code = main(["build", "--params", str(params), "--source", str(recordings), "--out-dir",
                 str(tmp_path / "processed"), "--report", str(report), "--no-progress"])
    assert code == 3
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err
    assert "3 unusable recording(s)" in errors[0] and "build.failed.json" in errors[0]
    assert not report.exists()
    failed = json.loads(report.with_name("build.failed.json").read_text())
    assert failed["n_unusable"] == 3
    (run,) = _runs(mlflow_store)                # the FAILED run says why, in the CLI's words
    assert run.info.status == "FAILED"
    assert run.data.tags[tracking.TAG_ERROR] == errors[0].removeprefix("error: ")


def test_manifest_errors_name_file_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "manifest.csv"
    bad.write_text("path,label\na.wav,LEAK\n")
    with pytest.raises(DataError, match=r"manifest.csv: manifest column 'class' missing"):
        discover(bad)
    bad.write_text("path,class,group\na.wav,LEAK,\n")
    with pytest.raises(DataError, match="line 2: column 'group' is empty"):
        discover(bad)
    bad.write_text("path,class,group\na.wav,LEAK,g\na.wav,LEAK,g\n")
    with pytest.raises(DataError, match="listed twice"):
        discover(bad)


def test_class_selection_requires_leak() -> None:
    recs = [Recording(Path(f"{c}.wav"), f"{c}.wav", c, c) for c in ("LEAK", "NORMAL", "CRACK")]
    kept, names = select_classes(recs, ("NORMAL", "LEAK"))
    assert names == ("LEAK", "NORMAL") and len(kept) == 2
    with pytest.raises(DataError, match="no LEAK recordings"):
        select_classes(recs[1:], ())
    with pytest.raises(DataError, match="'RAIN'"):
        select_classes(recs, ("LEAK", "RAIN"))


# -- real-data readiness: pieces of one recording, signal checks, every clip --------------------


def _pieces(root: Path, n_recordings: int = 4) -> None:
    """Class folders of recordings each cut into 3 pieces: ``<CLASS>/r<k>.s<i>.wav`` etc."""
    rng = np.random.default_rng(1)
    suffixes = (".s1", "_part2", "-PART3")
    for label in CLASSES:
        (root / label).mkdir(parents=True, exist_ok=True)
        for k in range(n_recordings):
            for suffix in suffixes:
                x = _tone(rng, label, 1.5, 8000).astype(np.float32) * 0.5
                sf.write(root / label / f"{label.lower()}{k}{suffix}.wav", x, 8000,
                         subtype="PCM_16")


def _split_of_ids(out: Path) -> dict[str, str]:
    where = {}
    for split in ("train", "val", "test"):
        with open_split(out / f"{split}.h5") as reader:
            where.update({rid: split for rid in reader.recording_ids})
    return where


def test_pieces_of_one_recording_share_a_split(tmp_path: Path, tiny_build_cfg) -> None:
    root = tmp_path / "raw"
    _pieces(root)
    build(tiny_build_cfg, root, tmp_path / "out", progress=False)
    where = _split_of_ids(tmp_path / "out")
    assert len(where) == 3 * 4 * 3
    by_recording: dict[str, set[str]] = {}
    for rid, split in where.items():
        name = rid.split("/")[1]  # leak0.s1.wav, leak0_part2.wav, leak0-PART3.wav -> leak0
        by_recording.setdefault(name.split(".")[0].split("_")[0].split("-")[0], set()).add(split)
    assert len(by_recording) == 12
    assert all(len(splits) == 1 for splits in by_recording.values()), by_recording
    assert {s for splits in by_recording.values() for s in splits} == {"train", "val", "test"}


def test_cli_group_by_file_overrides_the_param(tmp_path: Path, mlflow_store: str) -> None:
    root = tmp_path / "raw"
    _pieces(root)
    params = tmp_path / "params.yaml"
    text = (Path(__file__).resolve().parents[1] / "params.yaml").read_text()
    params.write_text(text.replace("workers: 2 ", "workers: 1 "))
    out = tmp_path / "out"
    code = main(["build", "--params", str(params), "--source", str(root), "--group-by", "file",
                 "--out-dir", str(out), "--report", str(tmp_path / "build.json"),
                 "--no-progress"])
    assert code == 0
    with open_split(out / "train.h5") as reader:
        assert list(reader.groups) == list(reader.recording_ids)  # every file its own group
    (run,) = _runs(mlflow_store)                # each split file's sha256, named with its split
    sha = {split: file_sha256(out / f"{split}.h5") for split in ("train", "val", "test")}
    assert run.data.tags[tracking.TAG_DATA] == (
        f"test:{sha['test']},train:{sha['train']},val:{sha['val']}")


def _runs(uri: str) -> list:
    client = mlflow.MlflowClient(tracking_uri=uri)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def _one_bad(root: Path, name: str, pcm: np.ndarray) -> Path:
    path = root / "NORMAL" / name
    sf.write(path, pcm, 8000, subtype="PCM_16")
    return path


def test_clipped_int16_recording_is_flagged_and_kept(tmp_path: Path, recordings: Path,
                                                     tiny_build_cfg) -> None:
    pcm = (np.random.default_rng(2).standard_normal(12000) * 6000).astype(np.int16)
    pcm[::40], pcm[1::40] = 32767, -32768  # 5 % of the samples at full scale
    clipped = _one_bad(recordings, "s0_0.wav", pcm)
    report = build(tiny_build_cfg, recordings, tmp_path / "out", progress=False).to_dict()
    assert report["n_unusable"] == 0 and report["n_recordings"] == 36
    assert report["flagged_by_check"] == {"clipped": 1}
    [flag] = report["flagged"]
    assert flag["path"] == str(clipped) and flag["checks"] == ["clipped"]
    assert "channel 0 is clipped: 5.00% of its samples at PCM_16 full scale" in flag["reason"]


def test_rejected_checks_follow_on_error(tmp_path: Path, recordings: Path,
                                         tiny_build_cfg) -> None:
    dead = _one_bad(recordings, "s1_0.wav", np.zeros(12000, np.int16))
    with pytest.raises(BuildFailed, match=r"s1_0\.wav: channel 0 is dead \(constant, all zero\)"):
        build(tiny_build_cfg, recordings, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    skip = dataclasses.replace(tiny_build_cfg, on_error="skip")
    report = build(skip, recordings, tmp_path / "out", progress=False).to_dict()
    assert [u["path"] for u in report["unusable"]] == [str(dead)]
    assert report["unusable"][0]["checks"] == ["dead"] and report["n_recordings"] == 35


def test_clipping_can_be_a_rejection(tmp_path: Path, recordings: Path, tiny_build_cfg) -> None:
    pcm = (np.random.default_rng(2).standard_normal(12000) * 6000).astype(np.int16)
    pcm[::40] = 32767
    _one_bad(recordings, "s0_0.wav", pcm)
    cfg = dataclasses.replace(tiny_build_cfg, on_error="skip", quality=dataclasses.replace(
        tiny_build_cfg.quality, reject=("clipped", "dead")))
    report = build(cfg, recordings, tmp_path / "out", progress=False).to_dict()
    assert report["n_flagged"] == 0 and report["unusable"][0]["checks"] == ["clipped"]


@pytest.mark.parametrize("seconds, clips", [(1.5, 1), (2.2, 2), (3.1, 3)])
def test_all_clips_per_recording(tmp_path: Path, tiny_build_cfg, seconds: float,
                                 clips: int) -> None:
    root = tmp_path / "raw"
    make_recordings(root, seconds=seconds)
    cfg = dataclasses.replace(tiny_build_cfg, clips_per_recording="all")  # 1 s clips
    report = build(cfg, root, tmp_path / "out", progress=False)
    assert sum(report.clips.values()) == 36 * clips
    with open_split(tmp_path / "out" / "train.h5") as reader:
        assert reader.n_files == clips * sum(report.recordings["train"].values())
