"""A corpus of bad recordings through the real `leakpipe build` command (issue #13).

Every recording here is generated in the test's own folder (soundfile, or RIFF bytes written by
hand) next to a few good ones, in the class-folder layout ``<root>/<CLASS>/<file>.wav``.
``CASES`` (tests/helpers_bad_audio.py) is the documented outcome of each: what `leakpipe build`
does with it and what the report (``reports/build.json``: ``unusable`` / ``flagged``) or the
error line says. The same table, for users, is in docs/data-format.md ("What build does with a
bad recording").

Decoding of each format, the signal checks and the build's mechanics are tested one at a time
in test_audio_io.py, test_audio_quality.py and test_build.py; here the corpus goes through the
command as a whole with ``build.on_error: skip``; test_bad_audio_single.py puts one bad entry
at a time next to the good recordings (``fail``, ``quality.reject``, entries that are not files).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from leakpipe.config import BuildConfig
from leakpipe.constants import SPLITS
from tests.helpers_bad_audio import (
    CASES,
    FLAGGED,
    KEPT_CASES,
    REJECTED,
    REJECTED_CASES,
    BuildRun,
    Case,
    Rows,
    good_recordings,
    ids,
    leakpipe_build,
    rows_by_recording,
    shown,
    write_case,
)

# -- the corpus with on_error: skip --------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, tiny_build_cfg: BuildConfig) -> BuildRun:
    """Good recordings plus every case, built once with ``on_error: skip``."""
    tmp = tmp_path_factory.mktemp("corpus")
    root = tmp / "raw"
    good_recordings(root)
    for case in CASES:
        write_case(root, case)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        return leakpipe_build(tmp, root, tiny_build_cfg, "skip")


@pytest.fixture(scope="module")
def corpus_rows(corpus: BuildRun) -> Rows:
    assert corpus.code == 0, corpus.stderr
    return rows_by_recording(corpus.out)


def test_corpus_builds_with_skip(corpus: BuildRun, corpus_rows: Rows) -> None:
    assert corpus.code == 0, corpus.stderr
    assert "Traceback" not in corpus.stderr and corpus.errors() == []
    report = json.loads(corpus.report.read_text())
    assert report["n_unusable"] == len(REJECTED_CASES)
    assert report["n_flagged"] == sum(c.outcome == FLAGGED for c in CASES)
    assert report["flagged_by_check"] == {"clipped": 1, "dc_offset": 1, "truncated": 2}
    good = 9
    assert report["n_recordings"] == good + len(KEPT_CASES)
    assert sum(report["clips"].values()) == good + sum(c.clips for c in KEPT_CASES)
    good_ids = {f"{c}/s{s}_0.wav" for c in ("LEAK", "NORMAL", "BACKGROUND") for s in range(3)}
    assert set(corpus_rows) == good_ids | {c.rel for c in KEPT_CASES}
    assert sorted(p.name for p in corpus.out.iterdir()) == ["test.h5", "train.h5", "val.h5"]
    # one summary line per list, each naming its first file
    [skipped] = [w for w in corpus.warnings() if "unusable recording(s)" in w]
    assert f"skipped {len(REJECTED_CASES)} unusable recording(s), first: " in skipped
    [flagged] = [w for w in corpus.warnings() if "recording(s) flagged" in w]
    assert f"{report['n_flagged']} recording(s) flagged" in flagged


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_each_case_has_its_documented_outcome(corpus: BuildRun, corpus_rows: Rows,
                                              case: Case) -> None:
    report = json.loads(corpus.report.read_text())
    path = str(corpus.source / case.rel)
    unusable = [u for u in report["unusable"] if u["path"] == path]
    flagged = [f for f in report["flagged"] if f["path"] == path]
    if case.outcome == REJECTED:
        [entry] = unusable
        reason = entry["reason"]
        assert reason.startswith(f"{shown(Path(path))}: ") and "\n" not in reason
        assert case.says in reason
        assert flagged == [] and case.rel not in corpus_rows
        return
    assert unusable == []
    split, labels, clip_index = corpus_rows[case.rel]
    assert split in SPLITS
    assert list(labels) == [case.rel.split("/")[0]] * case.clips
    np.testing.assert_array_equal(clip_index, np.arange(case.clips))  # clip by clip, in order
    if case.outcome == FLAGGED:
        [entry] = flagged
        assert entry["checks"] == list(case.checks) and case.says in entry["reason"]
    else:
        assert flagged == []
    if case.warns:
        assert any(path in w and case.warns in w for w in corpus.warnings()), corpus.stderr

