"""`leakpipe study grid`: the segmentation-grid study (paper Fig. 3) as queued DVC experiments.

    leakpipe study grid [--quick] [--jobs N] [--long 0.125,0.25,...] [--short 64,128,...]
                        [--metric test.clip_f1] [-S key=value ...] [--force] [--dry-run]

One DVC experiment per (long window, short window) cell, run N at a time with
`dvc queue start -j N`; the table, heatmap and MLflow run land in reports/grid/.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from leakpipe.commands._common import add_params_argument, positive_int
from leakpipe.errors import ConfigError

NAME = "study"
HELP = "segmentation-grid study: one queued DVC experiment per (long, short) window pair"
GRID = "grid"


def _list_of(cast: type, kind: str) -> Callable[[str], tuple]:
    """An argparse type: a comma-separated list of ``kind`` values, each through ``cast``."""
    def parse(text: str) -> tuple:
        try:
            return tuple(cast(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: not a comma-separated list of {kind}") from None
    return parse


_floats, _ints = _list_of(float, "numbers"), _list_of(int, "integers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from leakpipe.study.grid import (
        DEFAULT_METRICS,
        DEFAULT_OUT,
        DEFAULT_TARGET,
        FULL_LONG_S,
        FULL_SHORT,
        QUICK_LONG_S,
        QUICK_SETS,
        QUICK_SHORT,
    )

    parser.add_argument("study", choices=(GRID,), help="the study to run")
    add_params_argument(parser)
    parser.add_argument("--long", type=_floats, default=None,
                        help="long windows in seconds, comma-separated (default: "
                             f"{','.join(map(str, FULL_LONG_S))})")
    parser.add_argument("--short", type=_ints, default=None,
                        help="short windows in samples, comma-separated (default: "
                             f"{','.join(map(str, FULL_SHORT))})")
    parser.add_argument("--quick", action="store_true",
                        help=f"the 2 x 3 grid {QUICK_LONG_S} s x {QUICK_SHORT} with "
                             + " ".join(f"-S {k}={v}" for k, v in QUICK_SETS.items())
                             + " (minutes per cell on a CPU)")
    parser.add_argument("--jobs", "-j", type=positive_int, default=2,
                        help="experiments run at once (dvc queue start -j; default: 2)")
    parser.add_argument("--metric", action="append", default=None,
                        help="metrics/eval.json key to tabulate, e.g. test.clip_f1 (repeat for "
                             f"more; the first colours the heatmap; default: "
                             f"{' '.join(DEFAULT_METRICS)})")
    parser.add_argument("--set", "-S", action="append", default=[], metavar="KEY=VALUE",
                        help="a params override for every cell (dvc exp run -S)")
    parser.add_argument("--target", default=DEFAULT_TARGET,
                        help=f"the stage each experiment runs up to (default: {DEFAULT_TARGET})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"folder of the table and heatmap (default: {DEFAULT_OUT})")
    parser.add_argument("--baseline", default=None, metavar="COMMIT",
                        help="tabulate the cells run on this commit, queue nothing (default: "
                             "HEAD, running the missing cells)")
    parser.add_argument("--force", action="store_true",
                        help="re-run cells whose experiments already exist")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the cells and the dvc commands; queue nothing")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-S {item}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def run(args: argparse.Namespace) -> int:
    from leakpipe.study.grid import DEFAULT_METRICS, QUICK_LONG_S, QUICK_SETS, QUICK_SHORT
    from leakpipe.study.stage import GridOptions, run_grid

    quick_sets = {k: str(v) for k, v in QUICK_SETS.items()} if args.quick else {}
    options = GridOptions(
        longs_s=args.long or (QUICK_LONG_S if args.quick else GridOptions.longs_s),
        shorts=args.short or (QUICK_SHORT if args.quick else GridOptions.shorts),
        jobs=args.jobs, target=args.target,
        metrics=tuple(args.metric or DEFAULT_METRICS),
        sets={**quick_sets, **_sets(args.set)}, out=args.out, force=args.force,
        dry_run=args.dry_run, baseline=args.baseline, progress=not args.no_progress)
    return run_grid(options, args.params)
