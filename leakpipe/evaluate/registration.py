"""Registered detector versions that say what they are, and the registration step that ship
and adapt share.

A registry whose versions have empty descriptions answers none of the questions asked of it
(what was version 7 trained on, how good is it, how sure is that figure): every version gets a
description written by the stage that made it: ship's is the shipped detector's model card
(for the cnn kind evaluate's, ``leakpipe.evaluate.model_card``, built with the words and figures
here: the network, its training data from the train run of the network, the test figures with
their intervals; for logger_stats ``leakpipe.evaluate.stats_card``); adapt writes its own
(``leakpipe.adapt.report.adapted_description``). ``register_version`` registers a logged
detector with its description, tags and alias, and records the version on the run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from leakpipe import tracking
from leakpipe.detector import Network
from leakpipe.tracking import Tracker

log = logging.getLogger(__name__)

SHA_CHARS = 12            # a file's sha256 in a description: as the runs' datasets show it
TEST_FIGURES = (("F1", "clip_f1"), ("sensitivity", "clip_recall"),
                ("specificity", "clip_specificity"), ("ROC-AUC", "clip_roc_auc"))


def figure_text(metrics: Mapping[str, float], key: str) -> str:
    """``0.706 [0.669, 0.740]``: a figure with its interval (``<key>_ci_low`` / ``_ci_high``),
    alone when it has none (no bootstrap), ``n/a`` when it is undefined."""
    value = metrics.get(key)
    if value is None or not math.isfinite(value):
        return "n/a"
    low, high = metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def network_text(network: Network) -> str:
    """What the network is and which classes it learned."""
    f = network.features
    task = ("leak / no leak" if network.binary
            else f"{len(network.class_names)} classes, leak among them")
    return (f"LeakCNN on log-mel segments ({f.n_mels} mel bands, {f.sample_rate} Hz), data "
            f"classes {', '.join(network.data_class_names)} learned as {task}")


def training_text(data_tag: str | None) -> str:
    """The training data, from the train run's ``leakpipe.data_checksum`` (each split file's
    sha256 by split), or why it is not known here. No run id: the text goes into the model
    card file, which must not change when only the run does (``model_card.registry_description``
    adds the id to the registered version)."""
    if not data_tag:
        return "training data not known here (no train run of this network in the store)"
    digests = dict(part.split(":", 1) for part in data_tag.split(",") if ":" in part)
    splits = ", ".join(f"{split} split sha256 {digest[:SHA_CHARS]}"
                       for split, digest in sorted(digests.items()))
    return f"trained on the {splits}"


def register_version(run: Tracker, uri: str, name: str, *, alias: str,
                     tags: Mapping[str, str], description: str, artifact: str = "") -> str:
    """The logged detector ``uri`` as a new version of ``name`` with ``description`` and
    ``tags``, the alias ``alias`` moved to it and the run tagged with ``<name>/<version>``;
    returns the version. ``artifact``: the run artifact holding the whole description (a
    card), named in a description too long for the registry."""
    whole = f"runs:/{run.run_id}/{artifact}" if artifact else ""
    version = tracking.register_detector(uri, name, tags, description, whole)
    tracking.set_alias(name, alias, version)
    run.set_tags({tracking.TAG_REGISTERED_VERSION: f"{name}/{version}"})
    log.info("detector registered as %s version %s (alias %s)", name, version, alias)
    return version
