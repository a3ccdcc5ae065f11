"""leakpipe's imports only point down: the layer order below is the architecture.

Each line of ``LAYERS`` is one layer, lowest first. A module may import its own package and
any package of a LOWER layer; never a package of its own layer or above (a sibling there is a
peer: the evaluate stage does not reach into training, predict does not reach into evaluate).
Module cycles fail too, counting every import: one inside a function (a lazy import is still a
dependency) and one under ``if TYPE_CHECKING:`` (it never runs, but a module that needs another's
types and is needed by it is still a circle: move the shared piece down instead). Read
statically (AST), nothing is imported.

Where a change goes (docs/architecture.md says the same):

- constants / errors / paths / logs / metric_names: names and exceptions everything shares
  (metric_names: the figures' names and an older file's names read under the current ones);
- files, config, code_digest: atomic writes and hashes, typed params, the package source's
  digest (crossval and tune key their saved results on it);
- runtime (device / precision / memory format, decided once), allocator, tracking (the one
  MLflow adapter), monitor (training diagnostics), plots_page (DVC's plots as an offline page);
- decision (voting, metrics, operating point: pure), audio, features, cluster (Dask as build's,
  index's and crossval's engine beyond one machine);
- model (LeakCNN), data (HDF5 format, batch sources), build_recording (one recording's work in
  build, what a local or Dask worker runs);
- inference (the exact fast form), index, preload, validate, build: what the early stages do;
- scoring: the one loop that runs a network over batches of whole files;
- stats_model: the logger_stats model as a torch module (beside the CNN's model);
- detector: the network and detector files; stats_detector: the logger_stats and fused kinds
  of detector file;
- detectors: the interface every detector kind implements and the registry that finds a
  file's kind (and loads a detector of any kind); its ``kinds`` sub-package, one module per
  kind, sits at the top (below commands): a kind wires its pieces of every layer (rows, served
  scorer, graph, card, its fitting in ship), and the registry imports them inside a function
  (``SEAMS``: the one import that points up);
- predict: the command's package: the recordings selected, read and checked (``inputs``), the
  rows and the files they go to (``rows``, ``target``), the scoring rules (``rules``), a CNN's
  batched scoring (``scoring``, ``clips``), the recording-level loop and the logger_stats and
  fused rows (``stats``, ``fused``), the command (``run``);
- serve: predict as an MLflow pyfunc model, a scorer per detector kind (serve.cnn, serve.stats,
  serve.fused; evaluate and ship log it); export: the scoring network as ONNX with its rules as
  JSON; explain: band occlusion and a figure per recording (peers);
- train, evaluate: the stages that fit and judge a network, peers (evaluate also holds each
  kind's model card, the CNN's recording score and promote's verdicts of every kind, which
  ship and promote use from above);
- tune (calls train's fit), baselines (reuses evaluate's figures),
  study (the segmentation grid as queued DVC experiments);
- cv: grouped cross-validation of the CNN (train, evaluate) and the baselines;
- ship: the detector of the kind cv selected;
- detectors.kinds: the built-in kinds (cnn, logger_stats, fused);
- commands: argument parsing, one call each; then cli, the dispatch table.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests import test_dvc_deps
from tests.test_dvc_deps import PACKAGE, REPO, imported_names, module_file

LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "constants"),
    ("errors", "paths", "logs", "db_urls", "names", "metric_names"),
    ("files", "config", "code_digest"),
    ("runtime", "allocator", "tracking", "monitor", "plots_page"),
    ("decision", "audio", "features", "cluster"),
    ("model", "data", "stats_model", "build_recording"),
    ("inference", "index", "preload", "validate", "build"),
    ("scoring",),
    ("detector",),
    ("stats_detector",),
    ("detectors",),
    ("predict",),
    ("serve", "export", "explain"),
    ("train", "evaluate"),
    ("tune", "baselines", "study"),
    ("cv",),
    ("ship",),
    ("adapt",),                 # refits any kind: the statistics as ship fits them
    ("detectors.kinds",),
    ("commands",),
    ("cli",),
)
# packages whose sub-package sits in another layer than the package: the detector kinds wire
# pieces of every layer, the interface they implement is called from every surface
SPLIT_UNITS = {("detectors", "kinds")}
# the one import that points up, inside a function: the registry (low, called by every
# surface) loads the built-in kinds (top); it counts for the stages' code digests all the same
SEAMS = {("leakpipe/detectors/registry.py", "leakpipe/detectors/kinds/__init__.py")}
LAYER_OF = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def unit_of(path: Path) -> str:
    """leakpipe/train/fit.py -> train, leakpipe/model.py -> model (the unit a layer holds);
    leakpipe/detectors/kinds/cnn.py -> detectors.kinds: the kinds' modules sit at the top,
    the interface and the registry they implement low (``SPLIT_UNITS``)."""
    parts = path.relative_to(REPO / PACKAGE).with_suffix("").parts
    if parts[:2] in SPLIT_UNITS:
        return ".".join(parts[:2])
    return parts[0]


def module_edges() -> dict[Path, set[Path]]:
    """Every package module -> the package modules it imports (not their parent packages):
    every import, lazy and type-checking-only ones included, but the ``SEAMS``."""
    edges: dict[Path, set[Path]] = defaultdict(set)
    for path in sorted((REPO / PACKAGE).rglob("*.py")):
        for name in imported_names(path):
            target = module_file(name)
            if target is not None and target != path and (
                    str(path.relative_to(REPO)), str(target.relative_to(REPO))) not in SEAMS:
                edges[path].add(target)
    return edges


def test_every_package_unit_has_a_layer() -> None:
    units = {unit_of(p) for p in (REPO / PACKAGE).rglob("*.py")}
    assert sorted(units - set(LAYER_OF)) == [], "add new modules / packages to LAYERS"


def test_imports_point_down() -> None:
    upward = []
    for source, targets in module_edges().items():
        a = unit_of(source)
        for target in targets:
            b = unit_of(target)
            if a != b and LAYER_OF[b] >= LAYER_OF[a]:
                kind = "sideways" if LAYER_OF[b] == LAYER_OF[a] else "upward"
                upward.append(f"{source.relative_to(REPO)} -> {target.relative_to(REPO)} "
                              f"({kind}: {a} is layer {LAYER_OF[a]}, {b} layer {LAYER_OF[b]})")
    assert upward == []


def import_cycles(edges: dict[Path, set[Path]]) -> list[str]:
    """Every circle a depth-first walk meets, as ``a.py -> b.py -> a.py``."""
    state: dict[Path, int] = {}   # 1 = on the current path, 2 = done
    cycles = []

    def visit(node: Path, trail: list[Path]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                loop = trail[trail.index(nxt):] + [nxt]
                cycles.append(" -> ".join(str(p.relative_to(REPO)) for p in loop))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    return cycles


def test_no_import_cycles() -> None:
    assert import_cycles(module_edges()) == []


@pytest.mark.parametrize(("unit", "expected"),
                         [("train", 13), ("scoring", 7), ("serve", 12), ("adapt", 17), ("cli", 20)])
def test_layer_table_reads_as_documented(unit: str, expected: int) -> None:
    assert LAYER_OF[unit] == expected


def _package_copy(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the package under ``root`` that the checks read instead of the checkout: a
    probe module written into the real package would be seen by tests running beside this one
    (the suite runs on several workers)."""
    shutil.copytree(REPO / PACKAGE, root / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(test_dvc_deps, "REPO", root)
    monkeypatch.setattr(sys.modules[__name__], "REPO", root)
    return root / PACKAGE


def test_an_upward_import_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a decision module importing the trainer is reported."""
    package = _package_copy(tmp_path, monkeypatch)
    (package / "decision" / "_layer_probe.py").write_text(
        '"""probe"""\nfrom leakpipe.train import fit\n')
    with pytest.raises(AssertionError, match="_layer_probe.py -> leakpipe/train"):
        test_imports_point_down()


def test_a_lazy_or_type_checking_import_cycle_is_caught(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a imports b inside a function, b imports a only for type checking;
    neither runs at import time, both make the circle (evaluate.plots <-> detector_evaluation
    was one)."""
    probe = _package_copy(tmp_path, monkeypatch) / "decision"
    a, b = probe / "_cycle_probe_a.py", probe / "_cycle_probe_b.py"
    a.write_text('"""probe"""\n\n\ndef f() -> None:\n'
                 '    from leakpipe.decision import _cycle_probe_b  # noqa: F401\n')
    b.write_text('"""probe"""\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n'
                 '    from leakpipe.decision import _cycle_probe_a  # noqa: F401\n')
    cycles = import_cycles(module_edges())
    assert any("_cycle_probe_a.py -> leakpipe/decision/_cycle_probe_b.py" in c for c in cycles)


@pytest.mark.parametrize(("command", "unit"), [("evaluate", "evaluate"),
                                               ("predict", "predict"), ("promote", "evaluate")])
def test_scoring_commands_never_load_the_trainer(command: str, unit: str) -> None:
    """`leakpipe evaluate` / `predict` / `promote` with every module their run() imports lazily,
    in a fresh interpreter: nothing of leakpipe.train is loaded (nor torch's trainer parts with
    it); ``unit`` is the package that does the command's work."""
    path = REPO / PACKAGE / "commands" / f"{command}.py"
    modules = sorted({f"{PACKAGE}.commands.{command}",
                      *(n for n in imported_names(path) if module_file(n) is not None)})
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('leakpipe.train')))\n")
    out = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
    assert any(m == f"{PACKAGE}.{unit}" or m.startswith(f"{PACKAGE}.{unit}.") for m in modules)
