"""What a surface asks of a detector kind (``DetectorKind``) and the plain values they pass.

A kind is an object (one per kind, registered in ``leakpipe.detectors.registry``) whose methods
take the loaded detector; the detector itself only needs the few fields every surface reads
(``LoadedDetector``). The values that go between a surface and a kind are defined here, so a
kind's module and the surface agree on them without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from leakpipe.decision.domain_set import SetReference
from leakpipe.runtime import Runtime


@runtime_checkable
class LoadedDetector(Protocol):
    """A detector file of any kind, loaded: what every surface reads of it."""

    kind: str                       # the registry's key (the file's ``kind``)
    threshold: float                # the operating point on the raw score the call is taken on
    metrics: dict[str, float]       # the figures the file keeps (``test/recording_f1``, ...)

    @property
    def prob_threshold(self) -> float:
        """The operating point on the calibrated ``leak_prob`` scale (what rows show)."""
        ...

    @property
    def set_reference(self) -> SetReference | None:
        """The val recordings' domain distances a set of recordings is compared with (the set
        domain check); None when the kind keeps none."""
        ...


@dataclass(frozen=True)
class PredictJob:
    """`leakpipe predict` as a kind's ``predict`` receives it (the recordings and ``out``
    already checked: ``leakpipe.predict.target``)."""

    paths: Sequence[Path]           # recordings and folders, as the user gave them
    out: Path                       # the CSV
    model: str                      # the detector as the user named it (a path or a URI)
    file: Path                      # the local detector file
    params: Path                    # params.yaml (a CNN's scoring rules may come from it)
    runtime: Runtime
    resume: bool = False
    progress: bool = True
    max_batch_segments: int | None = None


@dataclass(frozen=True)
class ExplainSetup:
    """`leakpipe explain`'s options as a kind's ``explainer`` receives them."""

    params: Path
    runtime: Runtime
    bands_per_group: int = 4        # mel bands per occluded group (kinds with clips)
    fill: str = "floor"             # what an occluded band group is filled with


@dataclass(frozen=True)
class Rendered:
    """One recording's explanation: its figure, its JSON and the summary line's middle."""

    figure: Any                     # a matplotlib Figure
    data: dict[str, Any]
    line: str


@dataclass(frozen=True)
class Exported:
    """A kind's ONNX graph (checked against PyTorch) and the rules that make its inputs."""

    graph: bytes
    rules: dict[str, Any]
    doc: str                        # the graph's doc string
    max_diff: float                 # largest |onnxruntime - torch| on the check's inputs
    what: str                       # the summary line's words on the graph
    rules_what: str                 # ... and on the rules


class RowScorer(Protocol):
    """A served detector's scorer, built once at load time: predict's row of each source of a
    request (an ``AudioSource`` or a ``serve.request.Failed``), in order."""

    def rows(self, sources: list[Any]) -> list[dict[str, Any]]: ...


class DetectorKind(Protocol):
    """One detector kind: what predict, serve, explain, export, promote, ship and adapt need of
    it.

    ``Any`` stands for a loaded detector of this kind and for a higher layer's values
    (promote's ``ScoringSetup`` / ``SplitDecisions``, ship's ``Shipped`` / job), which this low
    layer cannot name.
    """

    name: str            # the file's ``kind``
    file_stage: str      # the stage whose MLflow run wrote the shipped file (its split digests)

    def load(self, raw: dict[str, Any], path: Path) -> Any:
        """The detector of a read file (``detector.read_detector_file``); a bad field is one
        ``DataError`` naming ``path``."""
        ...

    def predict(self, detector: Any, job: PredictJob) -> None:
        """Score ``job.paths`` into ``job.out`` (rows, the set domain check) and print the
        summary line."""
        ...

    def serve_scorer(self, detector: Any) -> RowScorer: ...

    def example_seconds(self, detector: Any) -> float:
        """How long the served model's logged input example's recordings are."""
        ...

    def explainer(self, detector: Any, setup: ExplainSetup) -> Callable[[Path], Rendered]:
        """A recording -> its explanation (raises ``predict.inputs.Unusable`` for a refused
        signal, ``DataError`` / ``OSError`` for one that cannot be read)."""
        ...

    def export(self, detector: Any, source: str, path: Path) -> Exported: ...

    def decide_split(self, detector: Any, path: Path, setup: Any, desc: str) -> Any:
        """promote's verdicts (``evaluate.promotion.SplitDecisions``) on a built split."""
        ...

    def ship(self, job: Any) -> Any:
        """`ship`'s fitting and test figures for this kind (``ship.stage.ShipJob`` ->
        ``ship.stage.ShipOutcome``)."""
        ...

    def card(self, shipped: Any) -> str:
        """The shipped detector's model card (``ship.registration.Shipped``), in Markdown."""
        ...

    def version_tags(self, detector: Any) -> dict[str, str]:
        """Tags of a registered version beyond every kind's (kind, sha256, test F1)."""
        ...

    def adapter(self, detector: Any, context: Any) -> Any:
        """`adapt`'s part of this kind (``adapt.adapter.Adapter``, built from an
        ``adapt.adapter.AdaptContext``): how it refits on train plus pseudo-labelled field
        recordings, and scores them; a kind with nothing to refit raises ``DataError``."""
        ...


__all__ = ["DetectorKind", "ExplainSetup", "Exported", "LoadedDetector", "PredictJob",
           "Rendered", "RowScorer"]
