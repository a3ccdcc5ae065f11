"""The two model files: the trained network (`models/model.pt`) and the detector
(`models/detector.pt`), each one versioned dict read with ``torch.load(weights_only=True)``.

- **Network** (train writes it): the unwrapped weights, the model config, the task's class
  names and the data's, the feature config the model was trained on (so `leakpipe predict`
  always computes matching features) and the per-clip input normalisation (``train.input_norm``).
  No operating point and no timings: identical weights give identical bytes.
- **Detector** (evaluate writes it): the network plus the operating point chosen on the val
  split (probability mode, rule, vote fraction, threshold), its headline test figures and the
  scoring rules (batch caps and memory margins, the shortest usable recording) and, since
  version 4, the calibration fitted on val (``leakpipe.decision.calibration``) that turns the
  rule's score into the reported ``leak_prob`` and, since version 5, the domain reference
  (``leakpipe.decision.domain``: the training recordings' band profiles and a distance
  threshold set on val) that marks each predicted recording ``in`` or ``shifted``; since
  version 6 that reference also keeps the val recordings' distances, so that a set of
  recordings can be checked as a whole (``set_check``); since version 7 the signal checks of
  `build.quality` (``leakpipe.audio.quality``: dead, clipped, DC offset), so that predict and
  the served model refuse or flag a recording as build did the training data. It is the
  one file that decides leaks: `leakpipe predict` and the MLflow logged model use it, so the
  threshold that is reported is the one that is deployed.

Detector files of versions 1 and 2 (train once wrote them as models/model.pt) still load; a
version 1 file predates ``input_norm`` and means ``none``; neither holds scoring rules, so
`leakpipe predict` takes those from params.yaml for them. Model config keys added later
(``model.level_input``) are written only when they differ from what a file without them means
(``leakpipe.config.training.ADDED_DEFAULTS``), so a network without the feature is the same
bytes as before it existed, and files without them load with that meaning. A detector file
older than version 4 has no calibration: it loads as uncalibrated (the identity, so
``leak_prob`` is the rule's raw score, as when it was written), with a WARNING saying so. A
detector file older than version 5 has no domain reference: predict reports ``domain`` as
``unknown`` for every recording, with one WARNING at loading. A version 5 reference has no
val distances: the set check of a predict run is then ``unknown``. A detector file older than
version 7 has no signal checks: predict takes `build.quality` from params.yaml for it (as it
takes the scoring rules of a file older than those), the served model the checks that need no
threshold (``quality.DEAD_ONLY``).

Detector files of the other kinds (version 8 with a ``kind``: logger_stats, fused) are read by
``leakpipe.detectors.registry.load_any_detector`` (through each kind's ``load``); a fused one
holds a whole CNN detector as its ``cnn`` (``detector_dict`` / ``detector_from``, the pieces of
this file's reading and writing).

Any file that is not a leakpipe model (a WAV, a JSON file, a foreign pickle, a damaged or
incomplete detector) is one ``DataError`` line naming it, never the unpickler's traceback.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from leakpipe.config import (
    INPUT_NORMS,
    FeatureConfig,
    ModelConfig,
    QualityConfig,
    from_mapping,
    stored_features,
)
from leakpipe.config.training import with_added_defaults, without_added_defaults
from leakpipe.data.input_norm import NORM_NONE, check_norm
from leakpipe.data.schema import leak_index
from leakpipe.decision.calibration import IDENTITY, Calibration
from leakpipe.decision.domain import DomainReference
from leakpipe.decision.voting import VotingConfig
from leakpipe.errors import DataError, LeakpipeError
from leakpipe.files import file_problem, save_torch_atomic
from leakpipe.inference import inference_form
from leakpipe.metric_names import current_names
from leakpipe.model import create_model, model_state
from leakpipe.scoring.batching import BatchLimits

NETWORK_FORMAT = "leakpipe.network"
NETWORK_VERSION = 1
DETECTOR_FORMAT = "leakpipe.detector"
DETECTOR_VERSION = 7
# Version 8 marks a detector file of another kind than the CNN (``kind``: logger_stats or
# fused, ``leakpipe.stats_detector``); the CNN's files keep version 7 and mean ``kind: cnn``.
KINDED_VERSION = 8
READABLE_VERSIONS = {NETWORK_FORMAT: (1,), DETECTOR_FORMAT: (1, 2, 3, 4, 5, 6, 7, KINDED_VERSION)}
CNN_KIND = "cnn"
UNCALIBRATED_FILE = "written before detector files held a calibration (version 4)"
NO_DOMAIN_FILE = "written before detector files held a domain reference (version 5)"
# What unpickling bytes that are no torch file (a WAV, JSON, a foreign pickle) can raise.
_NOT_TORCH = (pickle.UnpicklingError, RuntimeError, OSError, EOFError, ValueError, IndexError,
              KeyError, TypeError, AttributeError, OverflowError, MemoryError, struct.error)
# What a torch file with a model format but missing or ill-typed keys raises while building.
_DAMAGED = (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError)

_HEAD_BYTES = 16                  # bytes read to name what a refused file is
_MAGIC = ((b"RIFF", "a RIFF/WAV file"), (b"fLaC", "a FLAC file"), (b"OggS", "an OGG file"),
          (b"{", "a JSON file"), (b"[", "a JSON file"), (b"\x80", "a pickle, not a torch file"),
          (b"PK", "a ZIP archive that is no torch file"))

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Network:
    """A trained network in eval mode and what its inputs must look like."""

    model: nn.Module
    model_cfg: ModelConfig
    class_names: tuple[str, ...]        # the task's classes (NOLEAK / LEAK in binary mode)
    data_class_names: tuple[str, ...]   # the classes of the HDF5 data it was trained on
    binary: bool
    features: FeatureConfig
    input_norm: str = NORM_NONE         # per-clip normalisation the model expects

    @property
    def leak_index(self) -> int:
        return leak_index(self.class_names)

    def inference_model(self) -> nn.Module:
        """The model's exact, faster inference form for this network's segments."""
        return inference_form(self.model, self.features.segment_shape[-1])


@dataclass(frozen=True, kw_only=True)
class Detector(Network):
    """A network plus the operating point chosen on val: what decides a recording."""

    voting: VotingConfig
    threshold: float
    metrics: dict[str, float]
    batch_limits: BatchLimits | None = None   # scoring batch caps / memory margins (evaluate's)
    min_clip_fraction: float | None = None    # shortest usable recording, share of one clip
    calibration: Calibration = IDENTITY       # rule score -> leak probability, fitted on val
    domain: DomainReference | None = None     # training band profiles (None: domain unknown)
    quality: QualityConfig | None = None      # build.quality's signal checks (None: older file)

    @property
    def kind(self) -> str:
        """The detector kind (every kind has one: ``StatsDetector.kind`` is logger_stats)."""
        return CNN_KIND

    @property
    def set_reference(self) -> DomainReference | None:
        """What the set domain check compares a set's distances with: its own reference."""
        return self.domain

    def leak_prob(self, score: float) -> float:
        """The reported leak probability of a rule score (decisions use the score itself)."""
        return float(self.calibration.prob(score))

    @property
    def prob_threshold(self) -> float:
        """The operating point as a probability: ``leak_prob(s) >= prob_threshold`` for every
        score ``s >= threshold`` (the calibration is increasing)."""
        return self.leak_prob(self.threshold)


def with_operating_point(network: Network, **point: Any) -> Detector:
    """``network`` plus the detector fields in ``point`` (voting, threshold, metrics, ...)."""
    return Detector(**{f.name: getattr(network, f.name) for f in dataclasses.fields(Network)},
                    **point)


def save_network(path: Path, network: Network) -> None:
    """Write models/model.pt: weights and the network's description, no operating point."""
    save_torch_atomic({"format": NETWORK_FORMAT, "version": NETWORK_VERSION,
                       **_network_dict(network)}, Path(path))


def save_detector(path: Path, detector: Detector) -> None:
    """Write the detector file: the network plus its operating point and figures."""
    save_torch_atomic(detector_dict(detector), Path(path))


def detector_dict(detector: Detector) -> dict[str, Any]:
    """What a CNN detector file holds (a fused detector file holds it whole as its ``cnn``)."""
    return {
        "format": DETECTOR_FORMAT, "version": DETECTOR_VERSION, **_network_dict(detector),
        "voting": dataclasses.asdict(detector.voting),
        "threshold": float(detector.threshold),
        "metrics": {k: float(v) for k, v in detector.metrics.items()},
        "batch_limits": (dataclasses.asdict(detector.batch_limits)
                         if detector.batch_limits is not None else None),
        "min_clip_fraction": detector.min_clip_fraction,
        "calibration": detector.calibration.to_dict(),
        "domain": detector.domain.to_dict() if detector.domain is not None else None,
        "quality": (_plain(dataclasses.asdict(detector.quality))
                    if detector.quality is not None else None),
    }


def _network_dict(network: Network) -> dict[str, Any]:
    return {
        "model": model_state(network.model),
        "model_config": _plain(without_added_defaults("model",
                                                      dataclasses.asdict(network.model_cfg))),
        "class_names": list(network.class_names),
        "data_class_names": list(network.data_class_names),
        "binary": bool(network.binary),
        "features": network.features.to_dict(),
        "input_norm": check_norm(network.input_norm),
    }


def load_network(path: Path, map_location: str | torch.device = "cpu") -> Network:
    """The network of a network or detector file (evaluate reads train's model.pt)."""
    raw = _read(Path(path), map_location)
    try:
        return _network(raw, Path(path))
    except LeakpipeError:
        raise
    except _DAMAGED as exc:
        raise DataError(f"{path} is not a leakpipe model file ({_damage(exc)})") from None


def load_detector(path: Path, map_location: str | torch.device = "cpu") -> Detector:
    """A detector file; a network file (no operating point) is a ``DataError`` naming it."""
    path = Path(path)
    raw = _read(path, map_location)
    if raw["format"] != DETECTOR_FORMAT:
        raise DataError(f"{path}: a trained network without an operating point; use the "
                        "detector evaluate writes (models/detector.pt)")
    if (kind := raw.get("kind", CNN_KIND)) != CNN_KIND:
        raise DataError(f"{path}: a {kind} detector; this reads CNN detectors only (predict, "
                        "export and explain read every kind)")
    return detector_from(raw, path)


def detector_from(raw: dict[str, Any], path: Path) -> Detector:
    """The CNN detector of a loaded detector dict (a file's, or a fused file's ``cnn``); a
    missing or ill-typed part is one ``DataError`` naming ``path``."""
    try:
        return _detector(raw, path)
    except LeakpipeError:         # a named problem already (a bad input_norm, a bad key)
        raise
    except _DAMAGED as exc:
        raise DataError(f"{path} is not a leakpipe detector file ({_damage(exc)})") from None


def _damage(exc: BaseException) -> str:
    """A missing or ill-typed part of a model file in a few words: the exception's type and
    the first line of its text (torch's state-dict errors run over many lines)."""
    text = str(exc).strip().splitlines()
    return f"damaged or incomplete: {type(exc).__name__} {text[0] if text else ''}".rstrip()


def _detector(raw: dict[str, Any], path: Path) -> Detector:
    net = _network(raw, path)
    limits = raw.get("batch_limits")
    return with_operating_point(
        net, voting=VotingConfig(**raw["voting"]), threshold=float(raw["threshold"]),
        metrics=current_names(raw["metrics"]),
        batch_limits=BatchLimits(**limits) if limits is not None else None,
        min_clip_fraction=raw.get("min_clip_fraction"), calibration=_calibration(raw, path),
        domain=_domain(raw, path), quality=_quality(raw, path))


def _quality(raw: dict[str, Any], path: Path) -> QualityConfig | None:
    """The stored signal checks; none in a file older than version 7 (its reader falls back)."""
    stored = raw.get("quality")
    return None if stored is None else from_mapping(QualityConfig, stored, "quality", str(path))


def _calibration(raw: dict[str, Any], path: Path) -> Calibration:
    """The stored calibration; a file older than version 4 is uncalibrated (and says so)."""
    if "calibration" not in raw:
        log.warning("%s: %s; leak_prob is the rule's uncalibrated score (re-run evaluate to "
                    "calibrate it)", path, UNCALIBRATED_FILE)
        return Calibration(note=UNCALIBRATED_FILE)
    try:
        return Calibration.from_dict(raw["calibration"])
    except (TypeError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: calibration: {exc}") from None


def _domain(raw: dict[str, Any], path: Path) -> DomainReference | None:
    """The stored domain reference; none in a file older than version 5 (said once, here)."""
    if raw.get("domain") is None:
        if "domain" not in raw:
            log.warning("%s: %s; predict reports domain as unknown (re-run evaluate to add "
                        "it)", path, NO_DOMAIN_FILE)
        return None
    try:
        return DomainReference.from_dict(raw["domain"])
    except (TypeError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: domain: {exc}") from None


def read_detector_file(path: Path) -> dict[str, Any]:
    """The dict of a leakpipe model file of any kind (``kind`` absent: a CNN), checked for its
    format and version; anything else is one ``DataError`` line naming it."""
    return _read(Path(path), "cpu")


def _read(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    if problem := file_problem(path):
        raise DataError(f"{path}: {problem} (expected a detector file, e.g. models/detector.pt)")
    try:
        raw = torch.load(path, map_location=map_location, weights_only=True)
    except _NOT_TORCH as exc:
        raise DataError(f"{path} is not a leakpipe detector file ({_what(path, exc)}; evaluate "
                        "writes models/detector.pt)") from None
    kind = raw.get("format") if isinstance(raw, dict) else None
    if kind not in READABLE_VERSIONS:
        raise DataError(f"{path} is not a leakpipe detector file (a torch file without a "
                        "leakpipe format; train writes models/model.pt, evaluate "
                        "models/detector.pt)")
    if raw.get("version") not in READABLE_VERSIONS[kind]:
        raise DataError(f"{path}: {kind} version {raw.get('version')} is not one of "
                        f"{list(READABLE_VERSIONS[kind])}; retrain or use a matching leakpipe")
    return raw


def _what(path: Path, exc: BaseException) -> str:
    """What the bytes at ``path`` look like instead, for the one-line refusal."""
    with path.open("rb") as handle:
        head = handle.read(_HEAD_BYTES)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return f"{kind}; torch.load: {type(exc).__name__}"
    return f"starts with {head[:8]!r}; torch.load: {type(exc).__name__}"


def _network(raw: dict[str, Any], path: Path) -> Network:
    input_norm = raw.get("input_norm", NORM_NONE)
    if input_norm not in INPUT_NORMS:
        raise DataError(f"{path}: input_norm {input_norm!r} is not one of {list(INPUT_NORMS)}")
    model_cfg = from_mapping(ModelConfig, with_added_defaults("model", raw["model_config"]),
                             "model_config", str(path))
    class_names = tuple(raw["class_names"])
    model = create_model(model_cfg, len(class_names))
    model.load_state_dict(raw["model"])
    model.eval()
    return Network(model=model, model_cfg=model_cfg, class_names=class_names,
                   data_class_names=tuple(raw["data_class_names"]), binary=bool(raw["binary"]),
                   features=stored_features(raw["features"], "features", str(path)),
                   input_norm=input_norm)


def _plain(value: Any) -> Any:
    """Tuples -> lists so the dict round-trips through weights_only loading and from_mapping."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
