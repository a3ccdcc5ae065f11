"""What a user types is what leakpipe reads: class names in any case, group names in either
Unicode form, one reading contract for build / cv / predict, one row per recording in
predict, `--resume` only for the same call, and messages that say what to change.

Each test is one probe of a user's input, generated here; before the fix each gave a wrong
answer with exit 0 (or a message that stopped short).
"""

from __future__ import annotations

import dataclasses
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from leakpipe.audio.opening import UnreadFormat, open_audio, unread_format
from leakpipe.build import build, select_classes
from leakpipe.cli import main
from leakpipe.config import load_section
from leakpipe.constants import BINARY_CLASSES, EXIT_DATA
from leakpipe.cv.folds import make_folds
from leakpipe.data.manifest import discover
from leakpipe.data.splits import assign_splits
from leakpipe.errors import DataError
from leakpipe.model import create_model
from leakpipe.names import class_name, group_name
from leakpipe.validate.structure import SplitMeta
from leakpipe.validate.suite import required_classes
from tests.conftest import PARAMS
from tests.helpers_detector import (
    SMALL_MODEL,
    one_torch_thread,
    restore_logging,
    save_small_detector,
)
from tests.helpers_predict import read_predictions
from tests.test_build import make_recordings

_keep_logging = pytest.fixture(autouse=True)(restore_logging)
_one_thread = pytest.fixture(autouse=True)(one_torch_thread)

ZURICH_NFC = unicodedata.normalize("NFC", "Zürich")
ZURICH_NFD = unicodedata.normalize("NFD", "Zürich")


def _wav(path: Path, seed: int = 0, seconds: float = 1.0, rate: int = 4096) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    noise = 0.2 * np.random.default_rng(seed).standard_normal(int(seconds * rate))
    sf.write(path, noise.astype(np.float32), rate, subtype="PCM_16")
    return path


def _manifest(root: Path, rows: list[tuple[str, str, str]], header: str = "path,class,group"
              ) -> Path:
    (root / "manifest.csv").write_text("\n".join([header, *(",".join(r) for r in rows)]) + "\n",
                                       encoding="utf-8")
    return root / "manifest.csv"


# -- class and group names ---------------------------------------------------------------------

def test_names_are_stripped_nfc_and_classes_upper_case() -> None:
    assert ZURICH_NFC != ZURICH_NFD                              # two spellings, as bytes
    assert group_name(f" {ZURICH_NFD} ") == group_name(ZURICH_NFC) == ZURICH_NFC
    assert class_name(" leak ") == class_name("Leak") == "LEAK"
    assert class_name("noLeak") == "NOLEAK"
    assert group_name("Site-a") != group_name("site-A")          # groups keep their case


def test_manifest_classes_match_without_regard_to_case(tmp_path: Path) -> None:
    """`leak` / `noleak` on every third row: one class each, not four."""
    rows = [(_wav(tmp_path / f"r{i}.wav", i).name, ("leak" if i % 3 == 0 else "LEAK")
             if i % 2 else ("noleak" if i % 3 == 0 else "NOLEAK"), f"s{i % 4}")
            for i in range(12)]
    found = discover(_manifest(tmp_path, rows))
    assert sorted({r.label for r in found}) == ["LEAK", "NOLEAK"]
    assert sum(r.label == "LEAK" for r in found) == 6
    kept, names = select_classes(found, ("leak", "noleak"))      # params in any case too
    assert names == ("LEAK", "NOLEAK") and len(kept) == 12


def test_class_folders_match_without_regard_to_case(tmp_path: Path) -> None:
    _wav(tmp_path / "leak" / "a.wav", 1)
    _wav(tmp_path / "Normal" / "b.wav", 2)
    assert sorted(r.label for r in discover(tmp_path)) == ["LEAK", "NORMAL"]


def test_a_class_that_is_none_of_leakpipes_is_refused_naming_its_rows(tmp_path: Path) -> None:
    rows = [(_wav(tmp_path / f"r{i}.wav", i).name, "LEEK" if i < 5 else "LEAK", f"s{i}")
            for i in range(7)] + [(_wav(tmp_path / "n.wav", 9).name, "NOLEAK", "s0")]
    found = discover(_manifest(tmp_path, rows))
    with pytest.raises(DataError, match=r"class 'LEEK' \(5 row\(s\): r0.wav, r1.wav, r2.wav "
                                        r"and 2 more\) is none of .*build.classes") as info:
        select_classes(found, ())
    assert "\n" not in str(info.value)
    kept, names = select_classes(found, ("LEAK", "LEEK", "NOLEAK"))    # listed: the user's own
    assert "LEEK" in names and len(kept) == 8


def test_one_group_in_two_unicode_forms_is_one_site(tmp_path: Path) -> None:
    """A site written NFC on some rows and NFD on others: one group, so one split."""
    rows = []
    for i in range(24):
        site = (ZURICH_NFC, ZURICH_NFD)[i % 2] if i < 8 else f"site{i % 8}"
        rows.append((_wav(tmp_path / f"r{i}.wav", i).name, ("LEAK", "NOLEAK")[i % 4 < 2], site))
    found = discover(_manifest(tmp_path, rows))
    zurich = [r for r in found if r.group == ZURICH_NFC]
    assert len(zurich) == 8 and not [r for r in found if r.group == ZURICH_NFD]
    split = assign_splits([r.label for r in found], [r.group for r in found], (0.6, 0.2, 0.2), 0)
    assert len({int(split[i]) for i, r in enumerate(found) if r.group == ZURICH_NFC}) == 1


# -- messages that say what to change ------------------------------------------------------------

def test_a_repeated_header_row_names_its_line(tmp_path: Path) -> None:
    rows = [(_wav(tmp_path / "a.wav").name, "LEAK", "s0"), ("path", "class", "group"),
            (_wav(tmp_path / "b.wav", 1).name, "NOLEAK", "s1")]
    with pytest.raises(DataError, match=r"manifest.csv: line 3 repeats the header row"):
        discover(_manifest(tmp_path, rows))


def test_a_fold_too_small_to_split_names_the_inner_split_and_what_to_change() -> None:
    """3 sites, 2 folds: one fold keeps a single site outside its test fold."""
    labels = ["LEAK", "NOLEAK"] * 3
    groups = ["a", "a", "b", "b", "c", "c"]
    with pytest.raises(DataError) as info:
        make_folds(labels, groups, 2, 0.25, seed=0)
    text = str(info.value)
    assert "inner train / val split" in text and "1 remain" in text
    assert "{'LEAK': 1, 'NOLEAK': 1}" in text and "lower cv.folds (now 2)" in text


# -- one reading contract ---------------------------------------------------------------------

def test_a_format_predict_refuses_build_refuses_with_the_same_reason(tmp_path: Path,
                                                                    tiny_build_cfg) -> None:
    """An `.mp3` in a manifest (and in a class folder) is unusable for build as for predict."""
    raw = tmp_path / "raw"
    make_recordings(raw, n_sites=6, per_class=1)
    mp3 = raw / "LEAK" / "field.mp3"
    mp3.write_bytes(b"ID3\x03\x00" + bytes(2000))         # libsndfile might even decode one
    with pytest.raises(UnreadFormat) as refused:
        open_audio(mp3)
    assert str(refused.value) == unread_format(mp3)
    text = (raw / "manifest.csv").read_text()
    (raw / "manifest.csv").write_text(text + "LEAK/field.mp3,LEAK,site0,steel\n")
    cfg = dataclasses.replace(tiny_build_cfg, on_error="skip")
    report = build(cfg, raw, tmp_path / "processed", progress=False)
    assert [u["reason"] for u in report.unusable] == [unread_format(mp3)]
    (raw / "manifest.csv").unlink()                              # class folders: listed too
    assert str(mp3) in {str(r.path) for r in discover(raw)}


# -- predict: one row per recording, resume only the same call ---------------------------------

@pytest.fixture
def detector_path(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = create_model(SMALL_MODEL, len(BINARY_CLASSES))
    return save_small_detector(tmp_path / "detector.pt", model.eval(), "none")


def _predict(*args: str | Path) -> int:
    return main(["predict", *map(str, args), "--no-progress", "--device", "cpu"])


def test_one_recording_named_three_ways_is_one_row(tmp_path: Path, detector_path: Path) -> None:
    wav = _wav(tmp_path / "in" / "a.wav")
    os.symlink(wav, tmp_path / "link.wav")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "a.wav").write_bytes(wav.read_bytes())   # a byte-identical copy
    other = _wav(tmp_path / "in" / "b.wav", 1)
    out = tmp_path / "out.csv"
    named = [wav, tmp_path / "in" / ".." / "in" / "a.wav", tmp_path / "link.wav",
             tmp_path / "copy" / "a.wav", other]
    assert _predict(*named, "--model", detector_path, "--out", out) == 0
    lines = out.read_text().splitlines()[1:]
    assert [Path(line.split(",")[0]) for line in lines] == [wav, other]
    assert set(read_predictions(out)) == {"a.wav", "b.wav"}


def test_resume_refuses_rows_of_another_call(tmp_path: Path, detector_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _wav(tmp_path / "a.wav"), _wav(tmp_path / "b.wav", 1)
    out = tmp_path / "out.csv"
    assert _predict(a, "--model", detector_path, "--out", out) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert _predict(b, "--model", detector_path, "--out", out, "--resume") == EXIT_DATA
    err = capsys.readouterr().err
    assert "--resume continues the call that wrote it" in err and f"first: {a}" in err
    assert len(err.strip().splitlines()) == 1 and out.read_bytes() == before
    assert _predict(a, b, "--model", detector_path, "--out", out, "--resume") == 0   # the same
    assert set(read_predictions(out)) == {"a.wav", "b.wav"}                        # call, grown


def test_validate_reads_required_classes_in_any_case(tmp_path: Path) -> None:
    cfg = dataclasses.replace(load_section(PARAMS, "validate"), required_classes=("normal",))
    meta = SplitMeta("train", tmp_path / "train.h5", class_names=("LEAK", "NORMAL"))
    assert required_classes(meta, cfg) == ["NORMAL", "LEAK"]
