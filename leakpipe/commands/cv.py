"""`leakpipe cv`: grouped cross-validation of the CNN and the baselines (DVC stage `crossval`).

Two forms:

- on the pipeline's built splits (what `dvc repro` runs): the train, val and test files are
  pooled and cut into ``cv.folds`` folds over sites; outputs go where the options say;
- on any recordings, without touching params.yaml: ``leakpipe cv --source PATH --out DIR``
  builds the features into ``DIR/data`` with the params file's `build` section (``--group-by``
  overrides its ``group_by``; a manifest's ``group`` column wins), checks them as `validate`
  checks splits against each other, then cross-validates them: ``DIR/cv.json``,
  ``DIR/predictions.csv``, ``DIR/plots/``, resumable in ``DIR/work``. DIR is locked for the run
  and cleared of the previous run's outputs first (``leakpipe.cv.outdir``). It draws the
  site-to-fold assignment ``cv.source_repeats`` times (``--repeats``): a network of a few dozen
  sites is too few for one draw to settle which method is ahead.

Either form runs the folds here, one after another, or with ``--scheduler`` /
``LEAKPIPE_SCHEDULER`` on a Dask cluster (``leakpipe.cv.dispatch``), with the same outputs.

See leakpipe.cv.stage for the method.
"""

from __future__ import annotations

import argparse
import dataclasses
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from leakpipe.commands._cluster import add_cluster_arguments, cluster_settings
from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    param_int,
    validated_stamp,
)
from leakpipe.config import load_section
from leakpipe.config.crossval import CrossvalConfig
from leakpipe.data.manifest import GROUP_BY
from leakpipe.errors import ConfigError

if TYPE_CHECKING:
    from leakpipe.cv.outdir import OutLayout

NAME = "cv"
HELP = "grouped cross-validation over sites: the CNN and every baseline on the same folds"
SPLIT_NAMES = ("train", "val", "test")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--source", type=Path, default=None,
                        help="recordings to build and cross-validate (a manifest CSV with "
                             "path,class,group or a folder build reads); needs --out")
    parser.add_argument("--group-by", choices=GROUP_BY, default=None,
                        help="with --source, folder sources: which files share a group (site); "
                             "default build.group_by")
    parser.add_argument("--sample-rate", type=int, default=None, metavar="HZ",
                        help="with --source: build at this rate instead of build.sample_rate "
                             "(fmax capped at HZ / 2), e.g. the loggers' own rate when a "
                             "detector calls their recordings out of band")
    parser.add_argument("--folds", type=param_int(CrossvalConfig, "folds", "cv.folds"),
                        default=None,
                        help="K folds over groups (default: cv.folds)")
    parser.add_argument("--repeats", type=param_int(CrossvalConfig, "repeats", "cv.repeats"),
                        default=None,
                        help="N draws of the site-to-fold assignment: figures per draw, their "
                             "mean and its interval, the selection on the mean (default: "
                             "cv.source_repeats with --source, else cv.repeats)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for cv.json, predictions.csv, plots/ and work/ (replaces "
                             "the four path options below); locked while the run lasts, and "
                             "the previous run's outputs there are removed first")
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"),
                        help="without --source: folder of the built train.h5, val.h5, test.h5")
    add_validated_arguments(parser)
    parser.add_argument("--plan", type=Path, default=Path("reports/preload.json"),
                        help="without --source: the preload plan (placement, memory margins)")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/cv.json"),
                        help="pooled figures with intervals, per fold, paired difference")
    parser.add_argument("--predictions", type=Path, default=Path("reports/cv_predictions.csv"),
                        help="out-of-fold predictions: a row per clip, a column pair per method")
    parser.add_argument("--plots-dir", type=Path, default=Path("plots/cv"),
                        help="folder of folds.csv (DVC plot) and folds.png")
    parser.add_argument("--work", type=Path, default=Path("checkpoints/crossval"),
                        help="fold results and checkpoints; a rerun resumes from them")
    add_cluster_arguments(parser, chunk=False,
                          local="here, one fold after another; on a cluster each fold's "
                                "method groups are tasks and this process writes the results")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    from leakpipe.cv.outdir import claimed

    if args.source is not None and args.out is None:
        raise ConfigError("leakpipe cv: --source needs --out DIR (where the built data and the "
                          "results go)")
    inputs = [] if args.source is not None else _splits(args.data_dir).values()
    with claimed(args.out, inputs) if args.out is not None else nullcontext() as layout:
        return _run(args, layout)


def _splits(data_dir: Path) -> dict[str, Path]:
    return {s: data_dir / f"{s}.h5" for s in SPLIT_NAMES}


def _run(args: argparse.Namespace, layout: OutLayout | None) -> int:
    from leakpipe.cv.report import summary_line
    from leakpipe.cv.source import build_source
    from leakpipe.cv.stage import CvPaths, run_cv
    from leakpipe.data.stamp import trust_splits
    from leakpipe.tracking.names import TAG_CV_SOURCE

    if layout is not None:
        paths = CvPaths(splits={}, plan=None, metrics=layout.metrics,
                        predictions=layout.predictions, plots_dir=layout.plots_dir,
                        work=layout.work)
    else:
        paths = CvPaths(splits={}, plan=args.plan, metrics=args.metrics,
                        predictions=args.predictions, plots_dir=args.plots_dir, work=args.work)
    cluster = cluster_settings(args)
    if args.source is not None:
        splits = build_source(args.params, args.source, layout, group_by=args.group_by,
                              sample_rate=args.sample_rate,
                              progress=not args.no_progress, cluster=cluster)
        tags = {TAG_CV_SOURCE: str(Path(args.source).resolve())}   # its runs, named apart
    else:
        splits = _splits(args.data_dir)
        tags = trust_splits(validated_stamp(args), splits).tags
    repeats = args.repeats
    if repeats is None and args.source is not None:
        repeats = load_section(args.params, "cv").source_repeats
    summary = run_cv(dataclasses.replace(paths, splits=splits), args.params, folds=args.folds,
                     repeats=repeats, tags=tags, progress=not args.no_progress,
                     cluster=cluster)
    print(summary_line(summary, paths.metrics))
    return 0
