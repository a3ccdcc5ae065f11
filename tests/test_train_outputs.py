"""The train stage's output helpers: the plot data's columns and nested metric names."""

from __future__ import annotations

from leakpipe.train.outputs import history_csv, nest


def test_nest_turns_hierarchical_names_into_groups() -> None:
    assert nest({"val/clip_f1": 1.0, "val/pred_share/LEAK": 0.2, "best_epoch": 3}) == {
        "val": {"clip_f1": 1.0, "pred_share": {"LEAK": 0.2}}, "best_epoch": 3}


def test_history_csv_has_a_column_per_metric_and_blank_gaps() -> None:
    text = history_csv([{"epoch": 0.0, "train/loss": 1.5},
                        {"epoch": 1.0, "train/loss": 0.5, "vitals/step_p50_ms": 2.0}])
    assert text.splitlines() == ["epoch,train/loss,vitals/step_p50_ms", "0,1.5,", "1,0.5,2.0"]
