"""An explain figure keeps its verdict in sight: a shifted recording's reason can run to a
hundred characters or more, and a one-line title then ran off both sides of the image, taking
the file name, UNCERTAIN and leak_prob with it. The title leads with the verdict and wraps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from leakpipe.decision.domain import SHIFTED
from leakpipe.detector import load_detector
from leakpipe.explain.figure import explanation_figure, title
from leakpipe.explain.recording import explain_recording
from leakpipe.runtime import make_runtime
from tests.helpers_detector import LIMITS
from tests.test_explain import band_reader_detector, recording

REASON = ("band: the recording's band ends at 2048 Hz where training's recordings reach "
          "4096 Hz; statistics missing that training lacked on under 5 % of its recordings")
NAME = "a-rather-long-logger-name_2026-11-30T03-00-00_site-ZH-0042_channel-2.wav"


def _inside(fig: Figure, text: object) -> bool:
    """``text``'s drawn box lies within the figure's."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box, frame = text.get_window_extent(canvas.get_renderer()), fig.bbox
    return (box.x0 >= frame.x0 - 0.5 and box.x1 <= frame.x1 + 0.5
            and box.y0 >= frame.y0 - 0.5 and box.y1 <= frame.y1 + 0.5)


def test_the_cnn_figure_of_a_shifted_recording_shows_verdict_name_and_prob(
        tmp_path: Path) -> None:
    det = load_detector(band_reader_detector(tmp_path / "detector.pt"))
    ex = explain_recording(recording(tmp_path / "leak.wav", leak=True), det,
                           det.inference_model(), runtime=make_runtime("cpu"),
                           budget=LIMITS.cpu_max_segments, min_fraction=0.5,
                           bands_per_group=4, fill="floor")
    ex = dataclasses.replace(ex, path=tmp_path / NAME,
                             domain={"domain": SHIFTED, "domain_distance": 9.0,
                                     "domain_reason": REASON})
    assert ex.shown["verdict"] == "UNCERTAIN"
    fig = explanation_figure(ex)
    text = fig.get_suptitle()
    assert text.startswith("UNCERTAIN (leak_prob ") and NAME in text.replace("\n", "")
    assert REASON.split()[-1] in text                     # the reason whole, wrapped
    assert _inside(fig, fig._suptitle)


def test_a_title_wraps_to_the_width_it_is_drawn_at() -> None:
    call = {"verdict": "UNCERTAIN", "decision": "LEAK", "leak_prob": 0.7123, "threshold": 0.68,
            "domain": SHIFTED, "domain_reason": REASON}
    for width, points in ((8.0, 9), (6.0, 9), (12.0, 11)):
        fig = Figure(figsize=(width, 3.0), layout="constrained")
        ax = fig.subplots()
        shown = title(NAME, call, width, points)
        assert shown.startswith("UNCERTAIN") and len(shown.splitlines()) >= 2
        ax.set_title(shown, fontsize=points)
        assert _inside(fig, ax.title), (width, shown)
