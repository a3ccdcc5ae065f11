"""Stage ship's record of the shipped detector: its model card, its served MLflow model and its
registered version (the registry's ``candidate``).

The registry's ``candidate`` is the detector that ships, whatever its kind, so it is
registered here and nowhere else (evaluate logs its CNN but registers nothing): one `dvc repro`
makes one candidate, and `leakpipe promote` compares it with the champion, of any kind.

``publish_shipped`` is the one call `run_ship` makes, after the detector file and the report:

1. the card (``reports/shipped_model_card.md``, a DVC output): the kind's own card from
   ``CARD_WRITERS`` (keyed by the kind: a new kind plugs in here; a kind without a writer gets
   a plain card of ship's figures): `cnn` evaluate's card and ship's recording figures,
   `logger_stats` ``evaluate.stats_card``, `fused` ``evaluate.fused_card``; then why this kind
   was shipped (cv's selection);
2. the shipped file logged as the served pyfunc model (``serve.model.log_served_detector``:
   any kind with a scorer in ``serve.model.SCORERS``; one without is neither logged nor
   registered, with a WARNING), tagged ``leakpipe.detector_uri`` on the run;
3. with ``evaluate.registered_model`` set, a new version of it with the alias ``candidate``,
   tagged with the kind, this run, the file's sha256, ship's test recording F1 and the test
   split's sha256 (the git commit and DVC experiment come from the run itself); for the `cnn`
   kind also evaluate's run and its test clip F1, found by the file's sha256 (evaluate tags its
   run with it). The description is the card, then the network's train run where known
   (``model_card.registry_description``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from leakpipe import tracking
from leakpipe.baselines.logger_stats import read_recordings
from leakpipe.config import load_section
from leakpipe.decision.stats_domain import shifted_shares
from leakpipe.detector import CNN_KIND
from leakpipe.evaluate.fused_card import FusedCardInputs, fused_model_card
from leakpipe.evaluate.model_card import registry_description
from leakpipe.evaluate.registration import SHA_CHARS, register_version
from leakpipe.evaluate.stats_card import (
    StatsCardInputs,
    recording_figures_section,
    stats_model_card,
)
from leakpipe.files import file_sha256, write_text_atomic
from leakpipe.stats_detector import FUSED_KIND, StatsDetector, load_any_detector
from leakpipe.stats_detector import KIND as STATS_KIND

log = logging.getLogger(__name__)

STAGE = "ship"
DOMAIN_SPLITS = ("val", "test")      # the splits whose flagged share a stats card reports


@dataclass(frozen=True)
class Shipped:
    """What ship knows of the detector it shipped."""

    kind: str
    file: Path                        # models/shipped.pt
    report: Mapping[str, Any]         # metrics/ship.json (nested)
    metrics: Mapping[str, float]      # the same figures, flat: test/recording_f1, ...
    data_dir: Path                    # the built splits
    cnn_card: Path | None             # evaluate's reports/model_card.md (the cnn kind's card)
    params: Path
    sha256: str = ""                  # of ``file``
    split_sha: Mapping[str, str] | None = None   # split -> sha256 where a run knows it
    evaluate_run: str | None = None   # cnn: the evaluate run that wrote the file


def publish_shipped(run: tracking.Tracker, shipped: Shipped, card_path: Path | None) -> str | None:
    """Card, served model and registered version of ``shipped`` (module docstring); the
    registered version, or None when nothing was registered."""
    shipped = _linked(run, shipped)
    card = shipped_card(shipped)
    if card_path is not None:
        write_text_atomic(card_path, card)
        run.log_artifact(card_path, STAGE)
    if run.run_id is None:
        return None
    from leakpipe.serve.model import SCORERS, log_served_detector  # loads mlflow.pyfunc

    if shipped.kind not in SCORERS:
        log.warning("a %s detector cannot be served yet (leakpipe/serve/model.py SCORERS): "
                    "not logged as an MLflow model and not registered; the registry's %s "
                    "stays where it was", shipped.kind, tracking.ALIAS_CANDIDATE)
        return None
    uri = log_served_detector(shipped.file)
    run.set_tags({tracking.TAG_DETECTOR_URI: uri})
    name = load_section(shipped.params, "evaluate").registered_model
    if not name:
        log.info("evaluate.registered_model is empty: the shipped detector is not registered")
        return None
    train_run = (tracking.run_tag(shipped.evaluate_run, tracking.TAG_TRAIN_RUN)
                 if shipped.evaluate_run else None)
    return register_version(run, uri, name, alias=tracking.ALIAS_CANDIDATE,
                            tags=version_tags(shipped, str(run.run_id)),
                            description=registry_description(card, train_run),
                            artifact=f"{STAGE}/{card_path.name}" if card_path else "")


def _linked(run: tracking.Tracker, shipped: Shipped) -> Shipped:
    """``shipped`` with its file's sha256, the split digests a run recorded (this one, or for
    a cnn detector the evaluate run that wrote the file) and that evaluate run."""
    sha = file_sha256(shipped.file)
    evaluate_run = None
    if shipped.kind == CNN_KIND and run.run_id is not None:
        evaluate_run = tracking.find_run_id("evaluate", {tracking.TAG_DETECTOR_SHA256: sha})
    source = evaluate_run if shipped.kind == CNN_KIND else run.run_id
    digests = tracking.run_tag(source, tracking.TAG_DATA) if source else None
    return replace(shipped, sha256=sha, evaluate_run=evaluate_run,
                   split_sha=split_digests_of(digests))


def split_digests_of(tag: str | None) -> dict[str, str]:
    """A run's ``leakpipe.data_checksum`` (``test:<sha>,val:<sha>``) as split -> sha256."""
    return dict(part.split(":", 1) for part in (tag or "").split(",") if ":" in part)


def version_tags(shipped: Shipped, run_id: str) -> dict[str, str]:
    """The registered version's tags (module docstring, step 3)."""
    tags = {tracking.TAG_DETECTOR_KIND: shipped.kind, tracking.TAG_SHIP_RUN: run_id,
            tracking.TAG_DETECTOR_SHA256: shipped.sha256}
    if "test/recording_f1" in shipped.metrics:
        tags[tracking.TAG_TEST_RECORDING_F1] = f"{shipped.metrics['test/recording_f1']:.4f}"
    if "test" in (shipped.split_sha or {}):
        tags[tracking.TAG_TEST_SHA256] = (shipped.split_sha or {})["test"]
    if shipped.evaluate_run:
        tags[tracking.TAG_EVALUATE_RUN] = shipped.evaluate_run
        network_sha = tracking.run_tag(shipped.evaluate_run, tracking.TAG_MODEL_SHA256)
        if network_sha:
            tags[tracking.TAG_MODEL_SHA256] = network_sha
    if shipped.kind == CNN_KIND:                 # evaluate's per-clip F1, kept in the file
        clip_f1 = load_any_detector(shipped.file).metrics.get("test/clip_f1")
        if clip_f1 is not None:
            tags[tracking.TAG_TEST_F1] = f"{clip_f1:.4f}"
    return tags


# -- the card -------------------------------------------------------------------------------------


def shipped_card(shipped: Shipped) -> str:
    """The shipped detector's card: its kind's (``CARD_WRITERS``), then why it was shipped."""
    write = CARD_WRITERS.get(shipped.kind, _plain_card)
    return write(shipped).rstrip() + "\n\n" + _why(shipped.report) + "\n"


def _cnn_card(shipped: Shipped) -> str:
    """evaluate's card of the network (per clip), then ship's test figures per recording."""
    card = shipped.cnn_card
    if card is not None and card.is_file():
        text = card.read_text()
    else:
        text = (f"# Model card: cnn detector {shipped.sha256[:SHA_CHARS]}\n\nevaluate's model "
                f"card (`{card}`) was not found: run `dvc repro evaluate` for the network's "
                "description and its figures per clip.")
    return text.rstrip() + "\n\n" + _ship_figures(shipped)


def _stats_card(shipped: Shipped) -> str:
    detector = load_any_detector(shipped.file)
    ev = load_section(shipped.params, "evaluate")
    return stats_model_card(StatsCardInputs(
        detector=detector, metrics=shipped.metrics, criterion=ev.criterion,
        confidence=ev.confidence, detector_sha=shipped.sha256,
        split_sha=dict(shipped.split_sha or {}),
        source=str(load_section(shipped.params, "build").source),
        domain=_stats_shares(shipped, detector)))


def _fused_card(shipped: Shipped) -> str:
    detector = load_any_detector(shipped.file)
    ev = load_section(shipped.params, "evaluate")
    return fused_model_card(FusedCardInputs(
        detector=detector, metrics=shipped.metrics, criterion=ev.criterion,
        confidence=ev.confidence,
        fusion_c=load_section(shipped.params, "detector").fusion_C,
        detector_sha=shipped.sha256, split_sha=dict(shipped.split_sha or {}),
        source=str(load_section(shipped.params, "build").source),
        domain=_stats_shares(shipped, detector.logger_stats)))


def _stats_shares(shipped: Shipped, detector: StatsDetector) -> dict[str, float]:
    """The share of val and test recordings a statistics model's domain check flags."""
    net = detector.net
    tables = {s: read_recordings(shipped.data_dir / f"{s}.h5").stats[:, detector.columns]
              for s in DOMAIN_SPLITS if (shipped.data_dir / f"{s}.h5").is_file()}
    return shifted_shares(net.mean.numpy(), net.scale.numpy(), tables, detector.missing_share)


def _plain_card(shipped: Shipped) -> str:
    """A kind without a card writer: what ship measured, and that there is no more."""
    return (f"# Model card: {shipped.kind} detector {shipped.sha256[:SHA_CHARS]}\n\n"
            f"No model card writer for the {shipped.kind} kind yet (leakpipe/ship/"
            "registration.py CARD_WRITERS): ship's figures only.\n\n" + _ship_figures(shipped))


def _ship_figures(shipped: Shipped) -> str:
    if "test/recording_f1" not in shipped.metrics:
        return "## Figures per recording\n\nNot measured by ship for this detector."
    confidence = load_section(shipped.params, "evaluate").confidence
    return recording_figures_section(shipped.metrics, confidence, ("test",))


def _why(report: Mapping[str, Any]) -> str:
    kind, method = report.get("kind"), report.get("method")
    head = f"## Why this kind\n\n`leakpipe ship` shipped the {kind} detector"
    if "selected" not in report:
        return head + f": params.yaml `detector.method` names it ({method})."
    auc = report.get("cv_recording_roc_auc", {})
    text = (head + ": `detector.method` auto, and grouped cross-validation selected it "
            "(the kind's fold fits, not this file: pooled recording ROC-AUC "
            f"{auc.get('mean', float('nan')):.3f} "
            f"[{auc.get('ci_low', float('nan')):.3f}, {auc.get('ci_high', float('nan')):.3f}] "
            f"over {report.get('cv_recordings')} recordings at {report.get('cv_sites')} sites; "
            f"a more complex kind must win by more than {report.get('selection_margin')})")
    nested = report.get("cv_selected_nested")
    if nested:
        text += (f"; the nested estimate of the selection is "
                 f"{nested['recording_roc_auc']['mean']:.3f}")
    return text + "."


CARD_WRITERS: dict[str, Callable[[Shipped], str]] = {CNN_KIND: _cnn_card,
                                                      STATS_KIND: _stats_card,
                                                      FUSED_KIND: _fused_card}


__all__ = ["CARD_WRITERS", "Shipped", "publish_shipped", "shipped_card", "split_digests_of",
           "version_tags"]
