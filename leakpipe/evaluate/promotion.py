"""`leakpipe promote`: move the registry alias ``champion`` to ``candidate`` when the test data
say the candidate is at least as good (docs/evaluation.md#promotion).

``run_promote`` is what the command calls:

1. the versions behind ``candidate`` (set by ship: the shipped detector, of any kind) and
   ``champion`` in the registered model ``evaluate.registered_model``; no champion yet: the
   candidate becomes champion;
2. both detectors are fetched from the registry and decide the same test split's recordings
   (checked against the validation stamp), each at **its own** saved operating point (a cnn
   detector's probability mode, rule, vote fraction and threshold, a recording scored by the
   mean of its clips' scores as ship scores it; a logger_stats detector's threshold on the
   recording's statistics; a fused detector's stacker on both, at its threshold): one verdict
   per recording whatever the kinds
   (``promotion_scoring``, imported only then: the answers that need no scoring, a dry run
   with no champion yet or nothing to do, load no network);
3. a paired bootstrap over test recordings (``evaluate.bootstrap_resamples`` / ``confidence``
   / ``seed``, ``bootstrap.paired_f1_difference``) gives the percentile interval of
   F1(candidate) - F1(champion), recording F1; the candidate is promoted iff its lower end is
   >= ``-promote.margin``. Pairing matters: both detectors see the same resampled recordings,
   so the interval measures their difference, not the luck of the test set;
4. one MLflow run ``promote`` with the figures and the decision; only then, and only on a
   promotion, the alias ``champion`` moves. A refusal leaves both aliases as they were, prints
   one line (interval and margin) and returns ``EXIT_REFUSED``. ``dry_run`` prints the
   decision only: no run, no alias moved, the same exit code.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from leakpipe import tracking
from leakpipe.config import EvaluateConfig, PromoteConfig, load_section
from leakpipe.constants import EXIT_OK, EXIT_REFUSED
from leakpipe.data.stamp import trust_splits
from leakpipe.errors import ConfigError, DataError
from leakpipe.evaluate.bootstrap import Interval, paired_f1_difference
from leakpipe.tracking import ALIAS_CANDIDATE, ALIAS_CHAMPION, DetectorVersion

if TYPE_CHECKING:
    from leakpipe.evaluate.promotion_scoring import SplitDecisions

STAGE = "promote"
TEST = "test"
TAG_DECISION = "promote/decision"   # promoted | refused
TAG_REASON = "promote/reason"       # the figures and the rule, one line


@dataclass(frozen=True)
class PromotePaths:
    """What the command reads: the test split, the preload plan (placement, memory margins)
    and the validation stamp (None: --unvalidated)."""

    test: Path
    plan: Path
    validated: Path | None


@dataclass(frozen=True)
class Comparison:
    """The candidate's test F1 (one verdict per recording) and, with a champion, the
    champion's and the paired interval of F1(candidate) - F1(champion); ``recordings``: how
    many were decided (the unit the bootstrap resamples)."""

    candidate_f1: float
    recordings: int
    champion_f1: float | None = None
    interval: Interval | None = None

    @property
    def scored(self) -> str:
        """What was decided, in words: ``924 test recordings``."""
        return f"{self.recordings} test recordings"


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str       # one line: the figures and the rule that decided


# -- the rule -------------------------------------------------------------------------------------


def decide(comparison: Comparison, margin: float, confidence: float) -> Decision:
    """Promote iff there is no champion, or the interval's lower end is >= -``margin``."""
    if comparison.champion_f1 is None:
        return Decision(True, f"no {ALIAS_CHAMPION} yet; test F1 {comparison.candidate_f1:.4f} "
                              f"on {comparison.scored}")
    interval = comparison.interval
    if interval is None:
        raise ValueError("a comparison with a champion needs the interval of the difference")
    promote = interval.low >= -margin
    return Decision(promote, (
        f"test F1 {comparison.candidate_f1:.4f} vs {comparison.champion_f1:.4f} on "
        f"{comparison.scored}; F1(candidate) - F1(champion) {100 * confidence:g}% interval "
        f"[{interval.low:+.4f}, {interval.high:+.4f}], lower end "
        f"{'>=' if promote else '<'} -margin (promote.margin {margin:g})"))


def first_champion(candidate: DetectorVersion) -> Decision:
    """The decision with no champion yet, known without scoring: the candidate is promoted
    whatever its figures, so a dry run answers at once (a real promote still scores it, for
    the run's record). The F1 quoted is the test recording F1 ship tagged the version with
    (a version evaluate registered before ship did: its test F1 per clip)."""
    f1 = candidate.tags.get(tracking.TAG_TEST_RECORDING_F1)
    clip_f1 = candidate.tags.get(tracking.TAG_TEST_F1)
    figure = (f"; ship's test recording F1 {float(f1):.4f}" if f1 else
              f"; evaluate's test F1 per clip {float(clip_f1):.4f}" if clip_f1 else "")
    return Decision(True, f"no {ALIAS_CHAMPION} yet{figure} (nothing to compare with: the "
                          "test split was not scored)")


def compare(candidate: SplitDecisions, champion: SplitDecisions | None,
            cfg: EvaluateConfig, test: Path) -> Comparison:
    """The figures ``decide`` needs; the paired bootstrap resamples test recordings (one
    verdict each)."""
    recordings = len(candidate.truth)
    if champion is None:
        return Comparison(candidate.f1, recordings)
    if not (np.array_equal(candidate.truth, champion.truth)
            and np.array_equal(candidate.recording_id, champion.recording_id)):
        raise DataError(f"{test}: the two detectors read different recordings or labels "
                        "from it (different classes?); they cannot be compared on it")
    interval = paired_f1_difference(
        candidate.truth, candidate.decision, champion.decision, candidate.recording_id,
        resamples=cfg.bootstrap_resamples, confidence=cfg.confidence, seed=cfg.seed)
    if interval is None:
        raise DataError(f"{test}: F1 is undefined in every bootstrap resample (no LEAK "
                        "recording, none decided LEAK); the detectors cannot be compared on it")
    return Comparison(candidate.f1, recordings, champion.f1, interval)


# -- orchestration --------------------------------------------------------------------------------


def run_promote(paths: PromotePaths, params: Path, *, dry_run: bool = False,
                progress: bool = True, cards: bool = False) -> int:
    """The whole command; returns 0 (promoted, or nothing to do) or ``EXIT_REFUSED``. The
    decision is the first line it prints; ``cards``: both model cards follow it."""
    started = time.time()       # the run, opened once there is a decision, starts here
    cfg: EvaluateConfig = load_section(params, "evaluate")
    rule: PromoteConfig = load_section(params, STAGE)
    rt = load_section(params, "runtime")
    name = cfg.registered_model
    if not name:
        raise ConfigError(f"{params}: evaluate.registered_model: empty, so ship registers "
                          "no detector and there is nothing to promote")
    candidate = tracking.alias_version(name, ALIAS_CANDIDATE)
    if candidate is None:
        raise tracking.RegistryError(
            f"{name}: no version has the alias {ALIAS_CANDIDATE} in "
            f"{tracking.shown_tracking_uri()}; run `leakpipe ship` (or `dvc repro ship`) "
            "first")
    champion = tracking.alias_version(name, ALIAS_CHAMPION)

    def answer(line: str, code: int) -> int:
        print(line, file=sys.stdout if code == EXIT_OK else sys.stderr, flush=True)
        if cards:
            print(f"\n{cards_text(candidate, champion)}", end="")
        return code

    if champion is not None and champion.version == candidate.version:
        return answer(f"{STAGE}: {candidate.label} is {ALIAS_CANDIDATE} and {ALIAS_CHAMPION} "
                      "already; nothing to do", EXIT_OK)
    if champion is None and dry_run:
        return answer(decision_line(candidate, None, first_champion(candidate), dry_run),
                      EXIT_OK)
    if champion is not None and cfg.bootstrap_resamples < 1:
        raise ConfigError(f"{params}: evaluate.bootstrap_resamples: 0; promote compares with "
                          "the champion by a bootstrap interval and needs at least 1 resample")

    # the network, torch and the scoring path: loaded only now that there is something to score
    from leakpipe.evaluate.promotion_scoring import score_version, scoring_setup

    trust = trust_splits(paths.validated, {TEST: paths.test})
    setup = scoring_setup(paths.plan, cfg, rt, progress)
    scored = score_version(candidate, ALIAS_CANDIDATE, paths.test, setup)
    held = score_version(champion, ALIAS_CHAMPION, paths.test, setup) if champion else None
    comparison = compare(scored, held, cfg, paths.test)
    decision = decide(comparison, rule.margin, cfg.confidence)
    if not dry_run:
        with tracking.start_run(STAGE, tags=trust.tags, started_at=started) as run:
            trust.log_datasets(run, {TEST: paths.test})
            _log(run, candidate, champion, comparison, decision, cfg, rule)
            run.add_note(decision_line(candidate, champion, decision, dry_run))  # on its page
            if decision.promote:
                _crown(candidate, champion, run.run_id)
    return answer(decision_line(candidate, champion, decision, dry_run),
                  EXIT_OK if decision.promote else EXIT_REFUSED)


def _crown(candidate: DetectorVersion, champion: DetectorVersion | None,
           run_id: str | None) -> None:
    """Move ``champion`` to the candidate, unless it moved while the detectors were scored (a
    second promote at once): then this comparison is against the wrong champion."""
    now = tracking.alias_version(candidate.name, ALIAS_CHAMPION)
    if (now.version if now else None) != (champion.version if champion else None):
        raise tracking.RegistryError(
            f"{candidate.name}: {ALIAS_CHAMPION} moved to version "
            f"{now.version if now else None} during the comparison; run promote again")
    tracking.set_alias(candidate.name, ALIAS_CHAMPION, candidate.version)
    if run_id is not None:
        tracking.set_version_tags(candidate.name, candidate.version,
                                  {tracking.TAG_PROMOTE_RUN: run_id})


def _log(run: tracking.Tracker, candidate: DetectorVersion, champion: DetectorVersion | None,
         comparison: Comparison, decision: Decision, cfg: EvaluateConfig,
         rule: PromoteConfig) -> None:
    run.log_params({
        STAGE: dataclasses.asdict(rule),
        "evaluate": {k: getattr(cfg, k) for k in ("bootstrap_resamples", "confidence", "seed",
                                                  "registered_model")},
        "candidate_version": candidate.version,
        "champion_version": champion.version if champion else "none",
        "candidate_kind": _kind(candidate), "champion_kind": _kind(champion)})
    interval = comparison.interval
    metrics: dict[str, Any] = {
        f"{STAGE}/candidate_recording_f1": comparison.candidate_f1,
        f"{STAGE}/test_recordings": comparison.recordings,
        f"{STAGE}/promoted": float(decision.promote)}
    if comparison.champion_f1 is not None and interval is not None:
        diff = comparison.candidate_f1 - comparison.champion_f1
        metrics.update({f"{STAGE}/champion_recording_f1": comparison.champion_f1,
                        f"{STAGE}/recording_f1_diff": diff,
                        f"{STAGE}/recording_f1_diff_ci_low": interval.low,
                        f"{STAGE}/recording_f1_diff_ci_high": interval.high})
    run.log_metrics({k: float(v) for k, v in metrics.items() if math.isfinite(float(v))})
    run.set_tags({TAG_DECISION: "promoted" if decision.promote else "refused",
                  TAG_REASON: decision.reason})


def _kind(version: DetectorVersion | None) -> str:
    """The detector kind ship tagged ``version`` with (a version registered before kinds
    were tagged: ``untagged``)."""
    if version is None:
        return "none"
    return version.tags.get(tracking.TAG_DETECTOR_KIND, "untagged")


def cards_text(candidate: DetectorVersion, champion: DetectorVersion | None) -> str:
    """The model cards (registered descriptions) of both versions, each under a rule naming
    its alias (`leakpipe promote -v`: after the decision line, what each detector is)."""
    blocks = []
    for alias, version in ((ALIAS_CANDIDATE, candidate), (ALIAS_CHAMPION, champion)):
        if version is None:
            blocks.append(f"----- {alias}: none yet -----")
        elif champion is not None and alias == ALIAS_CHAMPION and \
                champion.version == candidate.version:
            blocks.append(f"----- {alias}: {version.label}, the same version -----")
        else:
            card = version.description.strip() or "(this version has no description)"
            blocks.append(f"----- {alias}: {version.label} -----\n{card}")
    return "\n\n".join(blocks) + "\n"


def decision_line(candidate: DetectorVersion, champion: DetectorVersion | None,
                  decision: Decision, dry_run: bool) -> str:
    """The one line the command prints."""
    head = f"{STAGE} (dry run)" if dry_run else STAGE
    was = f"v{champion.version}" if champion else "none"
    if decision.promote:
        verb = "would become" if dry_run else "is now"
        return (f"{head}: {candidate.label} {verb} {ALIAS_CHAMPION} (was {was}): "
                f"{decision.reason}")
    verb = "would be refused" if dry_run else "refused"
    return (f"{head}: {verb}: {candidate.label} stays {ALIAS_CANDIDATE}, {ALIAS_CHAMPION} stays "
            f"{was}: {decision.reason}")
