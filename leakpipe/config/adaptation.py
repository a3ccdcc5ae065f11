"""`adapt`: field adaptation of a trained detector by rounds of pseudo-labelling.

See leakpipe.adapt and docs/adaptation.md for the method.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakpipe.config.fields import num

__all__ = ["AdaptConfig"]


@dataclass(frozen=True, kw_only=True)
class AdaptConfig:
    """`adapt`: which unlabelled recordings, how many rounds, what each round keeps and learns."""

    source: str               # folder (searched for audio) or CSV with a `path` column
    check: str                # labelled field check set (build's source layouts); "" = none
    pool_truth: str           # CSV path,class of the pool: diagnostics only; "" = none
    rounds: int = num(ge=0)
    keep_fraction: float = num(gt=0, le=1)
    margin: float = num(ge=0, lt=1)
    pseudo_per_labelled: float = num(gt=0)
    epochs: int = num(ge=1)
    learning_rate: float = num(gt=0)
    tolerance: float = num(ge=0, le=1)   # most val clip F1 a round may lose against the seed's
    check_guard: bool         # also reject a round whose check-set clip F1 falls beyond tolerance
    #                           below the seed's
    seed: int = num(ge=0)

    def problems(self) -> list[tuple[str, str]]:
        if not self.source.strip():
            return [("source", "must name a folder or CSV of unlabelled recordings")]
        if self.check_guard and not self.check.strip():
            return [("check_guard", "needs a labelled check set (adapt.check)")]
        return []
