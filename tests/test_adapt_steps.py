"""The steps of an adaptation round, each on its own: score pool, pseudo-label, fine-tune (its
start and its refusal), the next round's split, guard, record, and the round state.

No training: the scores come from the fixed-weight detector of ``tests.helpers_detector``
(a segment whose log-mel values all equal v has the leak probability sigmoid(v - OFFSET)) on
hand-made feature arrays, the splits are tiny real HDF5 files, the records go to a real
MLflow SQLite store.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from leakpipe import tracking
from leakpipe.adapt import state as state_module
from leakpipe.adapt.field import FieldScores, FieldSet
from leakpipe.adapt.guard import rejection
from leakpipe.adapt.pseudo import (
    LEAK,
    NOT_LEAK,
    PoolLabels,
    Pseudo,
    label_pool,
    pseudo_labels,
)
from leakpipe.adapt.record import (
    ACCEPTED,
    REJECTED,
    SEED,
    STAGE,
    STATUS_TAG,
    record_round,
    round_entry,
    round_line,
    stop_reason,
)
from leakpipe.adapt.round_split import PSEUDO_GROUP, PSEUDO_PREFIX, RoundSplit, write_round_split
from leakpipe.adapt.rounds import fine_tune
from leakpipe.adapt.scoring import check_figures, score_pool, set_figures
from leakpipe.adapt.state import STATE_NAME, AdaptState
from leakpipe.config import DecisionConfig, TrainConfig, load_section
from leakpipe.constants import KNOWN_CLASSES
from leakpipe.data.reader import open_split
from leakpipe.detector import Detector, load_detector
from leakpipe.errors import DataError
from leakpipe.runtime import make_runtime
from leakpipe.tracking import NullTracker
from tests.conftest import PARAMS
from tests.helpers_detector import OFFSET, known_detector, one_torch_thread, write_prob_split
from tests.helpers_h5 import SMALL_FEATURES

_one_thread = pytest.fixture(autouse=True)(one_torch_thread)
N_LONG, N_SHORT, N_MELS, N_FRAMES = SMALL_FEATURES.segment_shape        # (7, 7, 16, 1)
LOUD, QUIET = OFFSET + 8.0, OFFSET - 8.0      # leak probability 0.9997 / 0.0003
BUDGET = 1024


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Detector:
    """The fixed-weight binary detector, threshold 0.5."""
    return load_detector(known_detector(tmp_path_factory.mktemp("det") / "detector.pt"))


def _recording(*levels: float) -> np.ndarray:
    """One clip whose long segments have the given log-mel levels (the rest the last one):
    (1, L, S, M, T) float32."""
    values = np.array([*levels, *[levels[-1]] * (N_LONG - len(levels))], dtype=np.float32)
    return np.broadcast_to(values[None, :, None, None, None],
                           (1, N_LONG, N_SHORT, N_MELS, N_FRAMES)).astype(np.float32)


def _field(*recordings: np.ndarray, truth: list[int] | None = None) -> FieldSet:
    keys = tuple(f"r{i}.wav" for i in range(len(recordings)))
    return FieldSet(keys, tuple(recordings),
                    None if truth is None else np.asarray(truth, dtype=np.int64))


# -- score pool ------------------------------------------------------------------------------
def test_the_pool_is_scored_by_the_rounds_detector(detector: Detector) -> None:
    pool = _field(_recording(LOUD), _recording(QUIET), _recording(LOUD, LOUD, QUIET))
    scores = score_pool(detector, pool, make_runtime("cpu"), BUDGET)
    assert scores.scores[0] > 0.99 and scores.scores[1] < 0.01
    assert [len(p) for p in scores.long_probs] == [N_LONG] * 3
    third = scores.long_probs[2]
    assert (third[:2] > 0.99).all() and (third[2:] < 0.01).all()
    assert scores.class_probs.shape == (3, 2)


def test_the_check_set_is_scored_at_the_rounds_threshold(detector: Detector) -> None:
    runtime = make_runtime("cpu")
    right = _field(_recording(LOUD), _recording(LOUD), _recording(QUIET), truth=[1, 1, 0])
    figures = check_figures(detector, right, runtime, BUDGET)
    assert figures is not None
    assert figures["fpr"] == 0.0 and figures["recall"] == 1.0 and figures["f1"] == 1.0
    wrong = _field(_recording(LOUD), _recording(QUIET), _recording(LOUD), truth=[1, 1, 0])
    figures = check_figures(detector, wrong, runtime, BUDGET)
    assert figures is not None and figures["fpr"] == 1.0 and figures["recall"] == 0.5
    assert check_figures(detector, None, runtime, BUDGET) is None          # no check set
    with pytest.raises(DataError, match="adapt.check"):
        check_figures(detector, _field(_recording(LOUD)), runtime, BUDGET)
    leaks_only = set_figures(np.array([1, 1]), np.array([0.9, 0.2]), 0.5)
    assert math.isnan(leaks_only["fpr"]) and leaks_only["recall"] == 0.5


# -- pseudo-label ----------------------------------------------------------------------------
def test_the_pool_is_pseudo_labelled_by_recording_key() -> None:
    probs = [np.array([0.9, 0.8, 0.7, 0.1]), np.array([0.52, 0.5]), np.array([0.1, 0.3, 0.2])]
    scores = np.array([0.8, 0.51, 0.2])
    out = label_pool(("a.wav", "b.wav", "c.wav"), scores, probs, 0.5, margin=0.05,
                     fraction=0.5)
    assert out.labels == {"a.wav": LEAK, "b.wav": None, "c.wav": NOT_LEAK}
    assert out.counts == {"leak": 1, "not_leak": 1, "within_margin": 1, "segments": 4}
    assert [p.kept.tolist() for p in out.pseudo] == [[0, 1], [], [0, 2]]
    same = pseudo_labels(scores, probs, 0.5, margin=0.05, fraction=0.5)
    assert [p.label for p in same] == [p.label for p in out.pseudo]
    with pytest.raises(ValueError):             # a key per recording, no more, no fewer
        label_pool(("a.wav",), scores, probs, 0.5, margin=0.05, fraction=0.5)


# -- fine-tune: where it starts, what it refuses --------------------------------------------
def test_a_round_fine_tunes_the_standing_rounds_network(tmp_path: Path) -> None:
    state = AdaptState.open(tmp_path / "work", "digest")
    seed_path = tmp_path / "detector.pt"
    state = state.added({"round": 0, "status": SEED})
    assert state.init_weights(seed_path) == seed_path          # nothing accepted yet
    state = state.added({"round": 1, "status": ACCEPTED})
    state = state.added({"round": 2, "status": REJECTED})
    assert state.accepted["round"] == 1
    assert state.init_weights(seed_path) == tmp_path / "work" / "round-01" / "network.pt"


def test_the_fine_tune_refuses_params_the_detector_was_not_trained_with(
        tmp_path: Path, detector: Detector) -> None:
    train = dataclasses.replace(load_section(PARAMS, "train"), binary=False, input_norm="none")
    assert isinstance(train, TrainConfig)
    decision = load_section(PARAMS, "decision")
    assert isinstance(decision, DecisionConfig)
    with pytest.raises(DataError, match="train.binary True"):
        fine_tune(tmp_path / "detector.pt", tmp_path / "none.h5", tmp_path / "none.h5", {},
                  detector, train, decision, epochs=1, learning_rate=1e-3,
                  runtime=make_runtime("cpu"), tracker=NullTracker(),
                  checkpoint_dir=tmp_path / "ckpt", progress=False)
    assert not (tmp_path / "ckpt").exists()


# -- the next round's split ------------------------------------------------------------------
def _pool_and_labels() -> tuple[FieldSet, FieldScores, list[Pseudo]]:
    """Three recordings whose long segment i has the level 10 r + i; pseudo-labels LEAK (4
    segments kept: one row), not LEAK (2 kept: one row), none."""
    pool = _field(*[_recording(*(10.0 * r + np.arange(N_LONG))) for r in range(3)])
    scores = FieldScores(np.array([0.9, 0.1, 0.5]), [np.zeros(N_LONG)] * 3,
                         np.full((3, 2), 0.5))
    pseudo = [Pseudo(LEAK, np.array([0, 2, 4, 6])), Pseudo(NOT_LEAK, np.array([1, 3])),
              Pseudo(None, np.zeros(0, dtype=np.int64))]
    return pool, scores, pseudo


def test_the_next_split_is_the_labelled_one_plus_capped_pseudo_rows(
        tmp_path: Path, detector: Detector) -> None:
    labels = [0, 1, 2, 3]
    train = write_prob_split(tmp_path / "train.h5", np.full((4, N_LONG, N_SHORT), 0.3), labels,
                             split="train")
    pool, scores, pseudo = _pool_and_labels()
    out = write_round_split(tmp_path / "all.h5", train, pool, scores, pseudo, detector,
                            ratio=1.0, seed=1)
    assert out == RoundSplit(labelled_rows=4, pseudo_rows=2, pseudo_rows_available=2)
    with open_split(tmp_path / "all.h5") as split, open_split(train) as labelled:
        assert split.labels.tolist() == [*labels, KNOWN_CLASSES.index("LEAK"), 0]
        assert split.recording_ids.tolist()[4:] == [PSEUDO_PREFIX + "r0.wav",
                                                     PSEUDO_PREFIX + "r1.wav"]
        assert split.groups.tolist()[4:] == [PSEUDO_GROUP] * 2
        mel = split.mel[:]
        assert np.array_equal(mel[:4], labelled.mel[:])
        # the LEAK row: segments 0, 2, 4, 6, then 0, 2, 4 again (level = segment index)
        assert mel[4, :, 0, 0, 0].tolist() == [0, 2, 4, 6, 0, 2, 4]
        assert mel[5, :, 0, 0, 0].tolist() == [11, 13, 11, 13, 11, 13, 11]
    capped = [write_round_split(tmp_path / f"cap{i}.h5", train, pool, scores, pseudo, detector,
                                ratio=0.25, seed=7) for i in range(2)]
    assert capped[0] == RoundSplit(4, 1, 2)                 # floor(0.25 x 4) = 1 pseudo row
    with open_split(tmp_path / "cap0.h5") as a, open_split(tmp_path / "cap1.h5") as b:
        assert a.recording_ids.tolist() == b.recording_ids.tolist()      # seeded: the same
        assert np.array_equal(a.mel[:], b.mel[:])


# -- guard -----------------------------------------------------------------------------------
def test_a_seed_without_a_finite_figure_guards_nothing() -> None:
    seed = {"round": 0, "val": {"f1": float("nan")}}
    assert rejection(1, seed, 0.1, None, tolerance=0.02, check_guard=True, standing=0) == ""
    reason = rejection(3, {"round": 0, "val": {"f1": 0.9}}, 0.5, None, tolerance=0.02,
                       check_guard=True, standing=2)
    assert reason.endswith("round 2's detector stands")


# -- record ----------------------------------------------------------------------------------
def _labels() -> PoolLabels:
    return label_pool(("a.wav", "b.wav"), np.array([0.9, 0.1]),
                      [np.array([0.9, 0.8]), np.array([0.1, 0.2])], 0.5, margin=0.0,
                      fraction=0.5)


def test_a_round_entry_holds_what_the_round_made_in_a_fixed_order() -> None:
    labels = _labels()
    check = {"f1": 1.0, "fpr": 0.0, "recall": 1.0}
    seed = round_entry(0, SEED, 0.5, {"f1": 1.0}, check, labels=labels)
    assert list(seed) == ["round", "status", "threshold", "val", "reason", "check", "pseudo",
                          "labels"]
    assert seed["labels"] == {"a.wav": LEAK, "b.wav": NOT_LEAK}
    accepted = round_entry(1, ACCEPTED, 0.4, {"f1": 0.9}, None, labels=labels,
                           previous={"a.wav": LEAK, "b.wav": LEAK},
                           truth={"a.wav": 1, "b.wav": 1},
                           split=dataclasses.asdict(RoundSplit(20, 3, 5)))
    assert list(accepted) == ["round", "status", "threshold", "val", "reason", "pseudo",
                              "labels", "changed", "pool", "split"]
    assert accepted["changed"] == 1 and accepted["pool"] == {"label_accuracy": 0.5}
    assert accepted["split"] == {"labelled_rows": 20, "pseudo_rows": 3,
                                 "pseudo_rows_available": 5}
    rejected = round_entry(2, REJECTED, 0.3, {"f1": 0.2}, check, reason="worse")
    assert list(rejected) == ["round", "status", "threshold", "val", "reason", "check"]


def test_adaptation_stops_on_a_rejection_or_with_nothing_left_to_learn() -> None:
    labels = _labels()
    entry = round_entry(1, ACCEPTED, 0.5, {"f1": 1.0}, None, labels=labels)
    assert stop_reason(entry, rounds=3, margin=0.05) == ""
    empty = {**entry, "pseudo": {**entry["pseudo"], "segments": 0}}
    assert stop_reason(empty, rounds=3, margin=0.05) == (
        "after round 1: no pool recording is outside the margin 0.05 of the threshold; "
        "nothing to learn from")
    assert stop_reason(empty, rounds=1, margin=0.05) == ""        # the last round: done anyway
    rejected = round_entry(2, REJECTED, 0.3, {"f1": 0.2}, None, reason="round 2 rejected: x")
    assert stop_reason(rejected, rounds=3, margin=0.05) == "round 2 rejected: x"


def test_a_round_line_says_its_fate_and_figures() -> None:
    labels = _labels()
    entry = round_entry(1, ACCEPTED, 0.456, {"f1": 0.91234}, {"fpr": 0.25, "recall": 1.0},
                        labels=labels, previous={"a.wav": LEAK})
    assert round_line(entry) == (
        "adapt round 1 (accepted): val F1 0.912 @ 0.46 | field check FPR 0.250 sensitivity "
        "1.000 | pseudo-labels 1 LEAK, 1 not, 0 within margin, 1 changed")
    seed = round_entry(0, SEED, 0.5, {"f1": 1.0}, None, labels=labels)
    assert round_line(seed).endswith("field check FPR n/a sensitivity n/a | pseudo-labels "
                                     "1 LEAK, 1 not, 0 within margin")


def test_recording_a_round_names_its_run_logs_its_figures_and_saves_the_state(
        tmp_path: Path, mlflow_store: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="leakpipe.adapt")
    state = AdaptState.open(tmp_path / "work", "digest")
    labels = _labels()
    seed = round_entry(0, SEED, 0.5, {"f1": 1.0}, {"f1": 1.0, "fpr": 0.0}, labels=labels)
    rejected = round_entry(1, REJECTED, 0.3, {"f1": 0.2}, None, reason="round 1 rejected: x")
    with tracking.start_run(STAGE) as parent:
        state = state.with_run(parent.run_id)
        for entry in (seed, rejected):
            with tracking.start_run(STAGE, parent_run_id=parent.run_id) as child:
                before = state
                state = record_round(state, entry, child, parent, rounds=3, margin=0.05)
                assert before.rounds == state.rounds[:-1]         # frozen: a new state each
    assert state.stop_reason == "round 1 rejected: x" and state.next_round == 2
    saved = json.loads((tmp_path / "work" / STATE_NAME).read_text())
    assert saved["run_id"] == parent.run_id and saved["stop_reason"] == state.stop_reason
    assert [r["status"] for r in saved["rounds"]] == [SEED, REJECTED]
    reopened = AdaptState.open(tmp_path / "work", "digest")
    assert reopened == state                                # what a resumed run goes on with
    client = MlflowClient(mlflow_store)
    runs = {r.info.run_name: r for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()])}
    assert runs["adapt round 0 (seed)"].data.tags[STATUS_TAG] == SEED
    assert runs["adapt round 1 (rejected)"].data.metrics["accepted"] == 0.0
    assert runs["adapt round 0 (seed)"].data.metrics["check/fpr"] == 0.0
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("WARNING", "adapt: round 1 rejected: x") in messages
    assert ("INFO", round_line(seed)) in messages


def test_a_rejected_round_and_its_stop_are_saved_in_one_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill between two writes would keep the rejected round without the stop, and the
    resumed run would carry on after it: the state file is written once, holding both."""
    writes: list[dict] = []
    real = state_module.write_json_atomic
    monkeypatch.setattr(state_module, "write_json_atomic",
                        lambda path, data: (writes.append(data), real(path, data)))
    state = AdaptState.open(tmp_path / "work", "digest").added({"round": 0, "status": SEED})
    writes.clear()
    rejected = round_entry(1, REJECTED, 0.3, {"f1": 0.2}, None, reason="round 1 rejected: x")
    state = record_round(state, rejected, tracking.NullTracker(), tracking.NullTracker(),
                         rounds=3, margin=0.05)
    assert len(writes) == 1
    assert writes[0]["stop_reason"] == "round 1 rejected: x"
    assert [r["status"] for r in writes[0]["rounds"]] == [SEED, REJECTED]


def test_other_inputs_empty_the_round_state(tmp_path: Path) -> None:
    state = AdaptState.open(tmp_path / "work", "one").added({"round": 0, "status": SEED})
    state.round_dir(1)
    assert AdaptState.open(tmp_path / "work", "one").next_round == 1
    fresh = AdaptState.open(tmp_path / "work", "two")
    assert fresh.rounds == () and not (tmp_path / "work" / "round-01").exists()
    with pytest.raises(dataclasses.FrozenInstanceError):
        fresh.stop_reason = "x"                              # type: ignore[misc]
