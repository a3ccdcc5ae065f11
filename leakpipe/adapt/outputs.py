"""What the adapt stage leaves when its rounds are done.

The newest accepted round (the seed when none was) becomes models/adapted_detector.pt (with
its operating point; a kind with a network also writes that, models/adapted.pt: the kind's
adapter), with metrics/adapt.json, the per-round table and figure, all logged to the stage's
MLflow run with the final figures (``final/*``). With ``evaluate.registered_model`` set, the
adapted detector becomes its own version of that registered model, tagged
``leakpipe.adapted`` and with the seed's kind, described, with the alias ``adapted`` (never
``candidate``: it is not scored on the test split), once per adapt run and only after an
accepted round.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from leakpipe import tracking
from leakpipe.adapt.adapter import Adapter
from leakpipe.adapt.inputs import AdaptPaths, AdaptSections
from leakpipe.adapt.record import STAGE, fmt_figure
from leakpipe.adapt.report import (
    ROUND_COLUMNS,
    adapted_description,
    metrics_document,
    round_metrics,
    round_row,
    rounds_figure,
)
from leakpipe.adapt.state import AdaptState
from leakpipe.evaluate.registration import register_version
from leakpipe.files import file_sha256, write_csv_atomic, write_json_atomic

log = logging.getLogger(__name__)


def write_outputs(adapter: Adapter, kind: str, paths: AdaptPaths, cfgs: AdaptSections,
                  state: AdaptState, parent: tracking.Tracker,
                  domain: Mapping[str, Any]) -> None:
    """The adapted detector (and network), the metrics, table and figure; logged and
    registered. ``domain`` is the seed's domain check of the field recordings."""
    final = state.accepted
    adapter.write_final(state.round_dir(final["round"]))
    rows = [round_row(e) for e in state.rounds]
    write_json_atomic(paths.metrics, {
        **metrics_document(state.rounds, final["round"], state.stop_reason), "domain": domain})
    write_csv_atomic(paths.plots, rows, ROUND_COLUMNS)
    figure = rounds_figure(rows)
    paths.figure.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(paths.figure, dpi=100)
    parent.set_tags({"leakpipe.adapt_stop_reason": state.stop_reason[:250]})
    parent.log_metrics({f"final/{k}": v for k, v in round_metrics(final).items()})
    for path in (paths.metrics, paths.plots, paths.figure, paths.adapted):
        parent.log_artifact(path, STAGE)
    if cfgs.evaluate.registered_model:
        _register_adapted(adapter, kind, paths, state, parent, cfgs.evaluate.registered_model)
    seed = state.rounds[0]
    log.info("adapt: %s; detector of round %d -> %s (field check FPR %s -> %s, sensitivity "
             "%s -> %s)", state.stop_reason, final["round"], paths.adapted,
             fmt_figure((seed.get("check") or {}).get("fpr")),
             fmt_figure((final.get("check") or {}).get("fpr")),
             fmt_figure((seed.get("check") or {}).get("recall")),
             fmt_figure((final.get("check") or {}).get("recall")))


def _register_adapted(adapter: Adapter, kind: str, paths: AdaptPaths, state: AdaptState,
                      parent: tracking.Tracker, name: str) -> None:
    """models/adapted_detector.pt as its own version of registered model ``name`` (evaluate's),
    tagged ``leakpipe.adapted``, with the alias ``adapted``: the same task, inputs and outputs
    as the evaluated versions, so one model; its own alias, because it was judged on val and
    the field check set, not on test (promote's ``candidate`` stays evaluate's). Once per adapt
    run: a rerun of a finished run, which changes nothing, registers nothing again. No round
    accepted: the adapted detector is the seed itself, so nothing is registered (an alias
    ``adapted`` on it would say it was adapted)."""
    if state.accepted["round"] == 0:
        log.info("adapt: no round was accepted; nothing registered (the alias %s stays where "
                 "it was)", tracking.ALIAS_ADAPTED)
        return
    if parent.run_id is None or tracking.run_tag(parent.run_id,
                                                 tracking.TAG_REGISTERED_VERSION):
        return
    from leakpipe.serve.model import log_served_detector  # loads mlflow.pyfunc: only here

    uri = log_served_detector(paths.adapted)
    parent.set_tags({tracking.TAG_DETECTOR_URI: uri})
    seed_sha = file_sha256(paths.detector)
    description = adapted_description(state.rounds, state.accepted["round"], state.stop_reason,
                                      network=adapter.describe(), seed_sha=seed_sha,
                                      pool=len(adapter.pool_keys), unit=adapter.unit)
    register_version(parent, uri, name, alias=tracking.ALIAS_ADAPTED, tags={
        tracking.TAG_ADAPTED: "true", tracking.TAG_ADAPT_RUN: parent.run_id,
        tracking.TAG_DETECTOR_KIND: kind,           # the seed's kind: adapt refits it
        tracking.TAG_SEED_SHA256: seed_sha}, description=description)
