"""Stage ship's record of the shipped detector: its model card, its served MLflow model and its
registered version (the registry's ``candidate``).

The registry's ``candidate`` is the detector that ships, whatever its kind, so it is
registered here and nowhere else (evaluate logs its CNN but registers nothing): one `dvc repro`
makes one candidate, and `leakpipe promote` compares it with the champion, of any kind.

``publish_shipped`` is the one call `run_ship` makes, after the detector file and the report:

1. the card (``reports/shipped_model_card.md``, a DVC output): the kind's own card
   (``DetectorKind.card``: `cnn` evaluate's card and ship's recording figures, `logger_stats`
   ``evaluate.stats_card``, `fused` ``evaluate.fused_card``); then why this kind was shipped
   (cv's selection);
2. the shipped file logged as the served pyfunc model (``serve.model.log_served_detector``,
   every kind), tagged ``leakpipe.detector_uri`` on the run;
3. with ``evaluate.registered_model`` set, a new version of it with the alias ``candidate``,
   tagged with the kind, this run, the file's sha256, ship's test recording F1 and the test
   split's sha256 (the git commit and DVC experiment come from the run itself) and the kind's
   own tags (``DetectorKind.version_tags``: a `cnn` detector's test clip F1); for a kind whose
   file another stage's run wrote (``DetectorKind.file_stage``: `cnn`, evaluate) also that run,
   found by the file's sha256 (evaluate tags its run with it). The description is the card,
   then the network's train run where known (``model_card.registry_description``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from leakpipe import tracking
from leakpipe.baselines.logger_stats import read_recordings
from leakpipe.config import load_section
from leakpipe.constants import DECISION_NAMES
from leakpipe.decision.stats_domain import shifted_shares
from leakpipe.detectors.registry import kind_named, load_any_detector
from leakpipe.evaluate.model_card import (
    manifest_conditions,
    per_condition_section,
    registry_description,
)
from leakpipe.evaluate.registration import SHA_CHARS, register_version
from leakpipe.evaluate.stats_card import recording_figures_section
from leakpipe.files import file_sha256, write_text_atomic
from leakpipe.stats_detector import StatsDetector

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
    rows: tuple[Mapping[str, Any], ...] = ()   # ship's val / test rows (PREDICTION_COLUMNS)


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
    from leakpipe.serve.model import log_served_detector  # loads mlflow.pyfunc

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
    writer = kind_named(shipped.kind).file_stage      # the stage whose run wrote the file
    evaluate_run = None
    if writer != STAGE and run.run_id is not None:
        evaluate_run = tracking.find_run_id(writer, {tracking.TAG_DETECTOR_SHA256: sha})
    source = evaluate_run if writer != STAGE else run.run_id
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
    tags.update(kind_named(shipped.kind).version_tags(load_any_detector(shipped.file)))
    return tags


# -- the card -------------------------------------------------------------------------------------


def shipped_card(shipped: Shipped) -> str:
    """The shipped detector's card: its kind's (``DetectorKind.card``), then why it was
    shipped."""
    return kind_named(shipped.kind).card(shipped).rstrip() + "\n\n" + _why(shipped.report) + "\n"


def stats_shares(data_dir: Path, detector: StatsDetector) -> dict[str, float]:
    """The share of val and test recordings a statistics model's domain check flags."""
    net = detector.net
    tables = {s: read_recordings(data_dir / f"{s}.h5").stats[:, detector.columns]
              for s in DOMAIN_SPLITS if (data_dir / f"{s}.h5").is_file()}
    return shifted_shares(net.mean.numpy(), net.scale.numpy(), tables, detector.missing_share)


def conditions_section(shipped: Shipped) -> str:
    """The card's per-condition section of ship's test recordings (``model_card.
    per_condition_section``, the manifest's material, sensor and rate columns)."""
    test = [r for r in shipped.rows if r["split"] == "test" and r["decision"] in DECISION_NAMES]
    conditions = manifest_conditions(Path(str(load_section(shipped.params, "build").source)))
    return per_condition_section(
        np.asarray([bool(int(r["truth"])) for r in test], bool),
        np.asarray([r["decision"] == DECISION_NAMES[1] for r in test], bool),
        np.asarray([str(r["recording_id"]) for r in test]), conditions,
        load_section(shipped.params, "evaluate").confidence, "recording")


def plain_card(shipped: Shipped, description: str) -> str:
    """A card of a kind with nothing more to say than ``description`` (Markdown) and ship's
    figures per recording."""
    return (f"# Model card: {shipped.kind} detector {shipped.sha256[:SHA_CHARS]}\n\n"
            f"{description.strip()}\n\n" + ship_figures_section(shipped) + "\n\n"
            + conditions_section(shipped))


def ship_figures_section(shipped: Shipped) -> str:
    """ship's test figures per recording, as a card section."""
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


__all__ = ["Shipped", "plain_card", "publish_shipped", "ship_figures_section", "shipped_card",
           "split_digests_of", "stats_shares", "conditions_section", "version_tags"]
