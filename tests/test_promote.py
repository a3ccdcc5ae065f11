"""The model registry and `leakpipe promote`, on a real SQLite MLflow store.

Detectors with known outputs (``tests.helpers_detector``) score a small test split: a threshold
of 0.99 decides nothing is a leak (F1 0), 0.5 separates the classes well. ship registers the
detector it ships as a version with the alias ``candidate``; promote moves ``champion`` by the
rule (paired bootstrap over test recordings of the recording F1 difference, lower end >=
-margin) or refuses with exit code 4. Detectors of other kinds against each other:
tests/test_promote_kinds.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.config import ConfigError, load_section
from leakpipe.detector import load_detector, save_detector
from leakpipe.errors import DataError
from leakpipe.evaluate.bootstrap import Interval
from leakpipe.evaluate.promotion import EXIT_REFUSED, Comparison, decide
from leakpipe.files import file_sha256
from leakpipe.serve.model import log_served_detector
from tests.conftest import PARAMS
from tests.helpers_detector import (
    copied_store,
    known_detector,
    one_torch_thread,
    restore_logging,
)
from tests.helpers_project import evaluable_project, ship_cnn

NAME = load_section(PARAMS, "evaluate").registered_model
CHAMPION_URI = f"models:/{NAME}@{tracking.ALIAS_CHAMPION}"
SPLIT_FILES = {"val": 40, "test": 40}

_keep_logging = pytest.fixture(autouse=True)(restore_logging)


_one_thread = pytest.fixture(autouse=True)(one_torch_thread)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo-like folder (a git checkout) with network, validated val / test splits, preload
    plan and an empty MLflow store; the working directory."""
    return evaluable_project(tmp_path, monkeypatch, SPLIT_FILES)


def _git_commit(root: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "t")
    return git("rev-parse", "HEAD")


def _promote(*args: str) -> int:
    return main(["promote", "--params", str(PARAMS), "--no-progress", *args])


def _alias(alias: str) -> str | None:
    found = tracking.alias_version(NAME, alias)
    return found.version if found else None


def _register_candidate(path: Path) -> str:
    """What ship does with a detector file: log it, register a version, alias candidate."""
    with tracking.start_run("ship") as run:
        uri = log_served_detector(path)
        version = tracking.register_detector(uri, NAME, {tracking.TAG_SHIP_RUN: run.run_id})
    tracking.set_alias(NAME, tracking.ALIAS_CANDIDATE, version)
    return version


def _promote_runs() -> list:
    import mlflow

    return mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.`{tracking.TAG_STAGE}` = 'promote'",
                              order_by=["attributes.start_time DESC"])


# -- the rule, alone ------------------------------------------------------------------------------


@pytest.mark.parametrize(("low", "margin", "promote"), [
    (0.0, 0.0, True),       # decision-identical detectors: a difference of exactly 0
    (0.01, 0.0, True),      # shown better
    (-0.01, 0.0, False),    # could be worse: refused at margin 0
    (-0.01, 0.02, True),    # ... tolerated within the margin
    (-0.03, 0.02, False),
])
def test_the_rule_compares_the_lower_end_with_the_margin(low: float, margin: float,
                                                         promote: bool) -> None:
    comparison = Comparison(0.9, 20, 0.9, Interval(low, low + 0.05))
    decision = decide(comparison, margin, 0.95)
    assert decision.promote is promote
    assert "95% interval" in decision.reason and f"promote.margin {margin:g}" in decision.reason
    assert "on 20 test recordings;" in decision.reason
    assert decide(Comparison(0.4, 20), margin, 0.95).promote       # no champion yet


def test_registry_params_are_checked(tmp_path: Path) -> None:
    raw = yaml.safe_load(PARAMS.read_text())
    for section, key, value, message in [
            ("evaluate", "registered_model", "a/b", "evaluate.registered_model: must not"),
            ("promote", "margin", -0.1, "promote.margin: must be >= 0"),
            ("promote", "bogus", 1, "promote.bogus: unknown key")]:
        bad = json.loads(json.dumps(raw))
        bad[section][key] = value
        path = tmp_path / "params.yaml"
        path.write_text(yaml.safe_dump(bad))
        with pytest.raises(ConfigError, match=message):
            load_section(path, section)
        assert main(["check", "--params", str(path), "--stamp",
                     str(tmp_path / "stamp.json")]) == 2      # the `check` stage stops on it


# -- ship registers, promote crowns ---------------------------------------------------------------


def _stage_run(stage: str) -> object:
    import mlflow

    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list",
                                filter_string=f"tags.`{tracking.TAG_STAGE}` = '{stage}'")
    return run


def test_ship_registers_the_evaluated_cnn_and_the_first_promote_crowns_it(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commit = _git_commit(project)
    assert main(["evaluate", "--params", str(PARAMS), "--no-progress"]) == 0
    assert tracking.alias_version(NAME, tracking.ALIAS_CANDIDATE) is None   # evaluate: none
    ship_cnn(project)
    evaluate_run, ship_run = _stage_run("evaluate"), _stage_run("ship")
    candidate = tracking.alias_version(NAME, tracking.ALIAS_CANDIDATE)
    assert candidate is not None and candidate.version == "1"
    assert ship_run.data.tags[tracking.TAG_REGISTERED_VERSION] == f"{NAME}/1"
    assert tracking.TAG_REGISTERED_VERSION not in evaluate_run.data.tags
    f1 = json.loads((project / "metrics" / "eval.json").read_text())["test"]["clip_f1"]
    recording_f1 = json.loads((project / "metrics" / "ship.json").read_text())["test"][
        "recording_f1"]
    assert candidate.tags[tracking.TAG_DETECTOR_KIND] == "cnn"
    assert candidate.tags[tracking.TAG_SHIP_RUN] == ship_run.info.run_id
    assert candidate.tags[tracking.TAG_EVALUATE_RUN] == evaluate_run.info.run_id
    assert candidate.tags[tracking.TAG_GIT_COMMIT] == commit
    assert float(candidate.tags[tracking.TAG_TEST_F1]) == pytest.approx(f1, abs=1e-4)
    assert float(candidate.tags[tracking.TAG_TEST_RECORDING_F1]) == pytest.approx(
        recording_f1, abs=1e-4)
    assert candidate.tags[tracking.TAG_TEST_SHA256] == file_sha256(
        project / "data" / "processed" / "test.h5")
    capsys.readouterr()

    assert _promote("--dry-run") == 0                    # the decision only, not scored
    out = capsys.readouterr().out
    assert out.startswith("promote (dry run): " + f"{NAME} v1 would become champion")
    assert "-----" not in out                            # the cards only with -v
    assert _promote("-v", "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.startswith("promote (dry run): " + f"{NAME} v1 would become champion")
    card = (project / "reports" / "shipped_model_card.md").read_text().strip()
    assert card.startswith((project / "reports" / "model_card.md").read_text().strip())
    assert f"----- candidate: {NAME} v1 -----\n{card}\n\n----- champion: none yet -----" in out
    assert (f"no champion yet; ship's test recording F1 {recording_f1:.4f} (nothing to "
            "compare with") in out
    assert _alias(tracking.ALIAS_CHAMPION) is None and _promote_runs() == []

    assert _promote() == 0                               # no champion yet: crowned
    assert "v1 is now champion (was none): no champion yet" in capsys.readouterr().out
    assert _alias(tracking.ALIAS_CHAMPION) == "1"
    (promote_run,) = _promote_runs()
    assert promote_run.data.tags["promote/decision"] == "promoted"
    # one verdict per recording, scored as ship scored it: the same F1
    assert promote_run.data.metrics["promote/candidate_recording_f1"] == pytest.approx(
        recording_f1, abs=1e-6)
    assert promote_run.data.metrics["promote/test_recordings"] == SPLIT_FILES["test"] // 2
    champion = tracking.alias_version(NAME, tracking.ALIAS_CHAMPION)
    assert champion is not None
    assert champion.tags[tracking.TAG_PROMOTE_RUN] == promote_run.info.run_id

    assert _promote() == 0                               # candidate is champion already
    assert "nothing to do" in capsys.readouterr().out
    assert len(_promote_runs()) == 1


def test_promote_refuses_a_worse_candidate_and_crowns_a_better_or_equal_one(
        project: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blind = known_detector(project / "v1" / "detector.pt", threshold=0.99)   # nothing is a leak
    good = known_detector(project / "v2" / "detector.pt", threshold=0.5)
    assert _register_candidate(blind) == "1" and _promote() == 0
    assert _alias(tracking.ALIAS_CHAMPION) == "1"

    assert _register_candidate(good) == "2"              # better: promoted
    capsys.readouterr()
    assert _promote("-v") == 0
    said = capsys.readouterr()
    out = said.out
    shown = round(load_detector(good).prob_threshold, 4)    # the scale predict shows
    assert f"a cnn detector, leak_prob threshold {shown:.4f} (raw 0.5)" in said.err
    assert out.startswith(f"promote: {NAME} v2 is now champion (was v1)"), out
    assert f"----- candidate: {NAME} v2 -----" in out and f"----- champion: {NAME} v1 -----" in out
    assert "lower end >= -margin" in out
    better = _promote_runs()[0].data.metrics
    assert better["promote/recording_f1_diff_ci_low"] > 0
    assert better["promote/champion_recording_f1"] == 0.0

    assert _register_candidate(blind) == "3"             # worse: refused, aliases kept
    capsys.readouterr()
    assert _promote("--dry-run") == EXIT_REFUSED
    assert "promote (dry run): would be refused" in capsys.readouterr().err
    assert _promote() == EXIT_REFUSED
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("promote")]
    assert line.startswith(f"promote: refused: {NAME} v3 stays candidate, champion stays v2: ")
    assert "95% interval [-" in line and "lower end < -margin (promote.margin 0)" in line
    assert (_alias(tracking.ALIAS_CHAMPION), _alias(tracking.ALIAS_CANDIDATE)) == ("2", "3")
    refused = _promote_runs()[0]
    assert refused.data.tags["promote/decision"] == "refused"
    assert line in refused.data.tags["mlflow.note.content"]      # the decision on its page
    assert refused.data.metrics["promote/recording_f1_diff_ci_high"] < 0
    assert refused.data.metrics["promote/promoted"] == 0.0

    lenient = tmp_path / "lenient.yaml"                  # the margin is the one read
    raw = yaml.safe_load(PARAMS.read_text())
    raw["promote"]["margin"] = 1.0
    lenient.write_text(yaml.safe_dump(raw))
    assert main(["promote", "--params", str(lenient), "--dry-run", "--no-progress"]) == 0
    assert _alias(tracking.ALIAS_CHAMPION) == "2"

    detector = load_detector(good)                       # equal decisions, a marked file
    equal = project / "v4" / "detector.pt"
    equal.parent.mkdir()
    save_detector(equal, dataclasses.replace(detector, metrics={"marker": 4.0}))
    assert _register_candidate(equal) == "4"
    assert _promote() == 0
    assert _alias(tracking.ALIAS_CHAMPION) == "4"
    assert _promote_runs()[0].data.metrics["promote/recording_f1_diff_ci_low"] == 0.0

    served = load_detector(tracking.download_model(CHAMPION_URI))
    assert served.metrics == {"marker": 4.0} and served.threshold == 0.5
    assert load_detector(tracking.download_model(f"models:/{NAME}/3")).threshold == 0.99


def test_promote_without_a_candidate_says_so(project: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _promote() == 1
    err = capsys.readouterr().err
    assert f"{NAME}: no version has the alias candidate" in err and "leakpipe ship" in err
    with pytest.raises(DataError, match="cannot be loaded from MLflow"):
        tracking.download_model(CHAMPION_URI)


def test_before_the_first_promote_serve_says_what_to_run_and_a_dry_run_answers_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """After `make run` the registry holds a candidate and no champion: `leakpipe serve` (the
    README's first serve command) says in one line to run `leakpipe promote` or to serve the
    candidate, and `promote --dry-run` decides without scoring (no test split here at all)."""
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    monkeypatch.chdir(tmp_path)
    store = tracking.tracking_uri()
    capsys.readouterr()      # MLflow's own lines when this process made the template store

    def serve_error() -> str:
        assert main(["serve", "--params", str(PARAMS)]) == 3     # nothing started
        (line,) = capsys.readouterr().err.splitlines()
        return line

    assert serve_error() == (f"error: {CHAMPION_URI}: no version of {NAME} has the alias "
                             f"champion in {store}, nor the alias candidate: run `dvc repro "
                             "ship` (or `make run`) to register a detector first")
    _register_candidate(known_detector(tmp_path / "detector.pt"))
    capsys.readouterr()
    assert serve_error() == (f"error: {CHAMPION_URI}: no champion yet in {store}: run "
                             "`leakpipe promote` (it makes the shipped candidate the "
                             "champion), or serve the candidate with --model "
                             f"models:/{NAME}@candidate")

    assert _promote("-v", "--dry-run", "--test", str(tmp_path / "absent.h5"),
                    "--plan", str(tmp_path / "absent.json")) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(
        f"promote (dry run): {NAME} v1 would become champion (was none): no champion yet "
        "(nothing to compare with: the test split was not scored)"), out
    assert f"\n\n----- candidate: {NAME} v1 -----\n(this version has no description)\n\n" \
           "----- champion: none yet -----\n" in out, out
    assert _alias(tracking.ALIAS_CHAMPION) is None and _promote_runs() == []
