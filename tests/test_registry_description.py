"""A registered version's description holds the whole card, or says where the whole card is:
MLflow keeps 5,000 characters of a description, and a card cut there silently lost its last
section (the cross-validation figures behind the shipped kind)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from leakpipe import tracking
from leakpipe.constants import BINARY_CLASSES
from leakpipe.evaluate.registration import register_version
from leakpipe.model import create_model
from leakpipe.serve.model import log_served_detector
from leakpipe.tracking.models import DESCRIPTION_CHARS, fitted_description
from tests.helpers_detector import SMALL_MODEL, copied_store, save_small_detector

WHOLE = "runs:/abc/ship/shipped_model_card.md"


def _card(lines: int) -> str:
    return "# Model card\n\n" + "".join(f"- figure {i}: {'x' * 60} {i}\n" for i in range(lines))


def test_a_card_that_fits_is_the_description_unchanged() -> None:
    card = _card(40)
    assert len(card) < DESCRIPTION_CHARS and fitted_description(card, WHOLE) == card


@pytest.mark.parametrize("lines", [80, 500])
def test_a_longer_card_names_where_the_whole_one_is_and_cuts_at_a_line(lines: int) -> None:
    card = _card(lines)
    text = fitted_description(card, WHOLE)
    assert len(card) > DESCRIPTION_CHARS >= len(text)
    head, body = text.split("\n\n", 1)
    assert WHOLE in head and f"{len(card):,} characters" in head
    kept, tail = body.rsplit("\n_... ", 1)
    assert card.startswith(kept) and kept.endswith("\n")          # whole lines only
    assert tail == f"{len(card) - len(kept):,} more characters in the whole card (`{WHOLE}`)._"


def test_the_registry_keeps_the_fitted_description(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SQLite registry: the version's description is the card's beginning and the run
    artifact that holds the whole card."""
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", copied_store(tmp_path / "mlruns"))
    torch.manual_seed(0)
    detector = save_small_detector(tmp_path / "detector.pt",
                                   create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval(), "none")
    card = _card(120)
    with tracking.start_run("ship") as run:
        version = register_version(run, log_served_detector(detector), "described",
                                   alias=tracking.ALIAS_CANDIDATE, tags={}, description=card,
                                   artifact="ship/shipped_model_card.md")
        run_id = run.run_id
    kept = tracking.alias_version("described", tracking.ALIAS_CANDIDATE)
    assert kept is not None and kept.version == version
    assert len(kept.description) <= DESCRIPTION_CHARS
    assert f"runs:/{run_id}/ship/shipped_model_card.md" in kept.description.split("\n\n")[0]
    assert "more characters in the whole card" in kept.description
