"""The README's stage row for `field` says what the field set's interference is in the code.

The row once called it "broadband machine noise" while ``audio.site`` draws a band about an
octave wide (docs/synth.md says so): a reader choosing features or a `model.tonal_median` from
the README would have planned for the wrong shift. The row's figures are read from the
constants the synthesis draws from, so a change there that the README misses fails here.
"""

from __future__ import annotations

from leakpipe.audio.site import (
    MACHINE_BANDWIDTH_OCT,
    MACHINE_BURST_S,
    MACHINE_CENTRE_HZ,
    MACHINE_ENGINE_HZ,
)
from tests.conftest import REPO


def _span(bounds: tuple[float, float], unit: str) -> str:
    """``(0.8, 1.2), "octaves"`` -> ``0.8-1.2 octaves``: how the README writes a range."""
    return f"{bounds[0]:g}-{bounds[1]:g} {unit}"


def _field_row() -> str:
    rows = [line for line in (REPO / "README.md").read_text().splitlines()
            if line.startswith("| `field` |")]
    assert len(rows) == 1, "README.md: expected one stage-table row for `field`"
    return rows[0]


def test_the_field_row_describes_the_machine_band_the_code_draws() -> None:
    row = _field_row()
    assert "broadband" not in row                    # a band about an octave wide is not
    assert f"noise band {_span(MACHINE_BANDWIDTH_OCT, 'octaves')} wide" in row
    assert f"centred at {_span(MACHINE_CENTRE_HZ, 'Hz')}" in row
    assert _span(MACHINE_ENGINE_HZ, "Hz") in row and _span(MACHINE_BURST_S, "s") in row
