"""`leakpipe cv`: grouped cross-validation of the CNN and the baselines (DVC stage `crossval`).

Two forms:

- on the pipeline's built splits (what `dvc repro` runs): the train, val and test files are
  pooled and cut into ``cv.folds`` folds over sites; outputs go where the options say;
- on any recordings, without touching params.yaml: ``leakpipe cv --source PATH --out DIR``
  builds the features into ``DIR/data`` with the params file's `build` section (``--group-by``
  overrides its ``group_by``; a manifest's ``group`` column wins), then cross-validates them:
  ``DIR/cv.json``, ``DIR/predictions.csv``, ``DIR/plots/``, resumable in ``DIR/work``.

See leakpipe.cv.stage for the method.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    positive_int,
    validated_stamp,
)
from leakpipe.data.manifest import GROUP_BY
from leakpipe.errors import ConfigError

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
    parser.add_argument("--folds", type=positive_int, default=None,
                        help="K folds over groups (default: cv.folds)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for cv.json, predictions.csv, plots/ and work/ (replaces "
                             "the four path options below)")
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
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    from leakpipe.cv.stage import CvPaths, run_cv, summary_line
    from leakpipe.data.stamp import trust_splits

    if args.source is not None and args.out is None:
        raise ConfigError("leakpipe cv: --source needs --out DIR (where the built data and the "
                          "results go)")
    if args.out is not None:
        paths = CvPaths(splits={}, plan=None, metrics=args.out / "cv.json",
                        predictions=args.out / "predictions.csv",
                        plots_dir=args.out / "plots", work=args.out / "work")
    else:
        paths = CvPaths(splits={}, plan=args.plan, metrics=args.metrics,
                        predictions=args.predictions, plots_dir=args.plots_dir, work=args.work)
    if args.source is not None:
        splits = _build(args)
        tags = {}
    else:
        splits = {s: args.data_dir / f"{s}.h5" for s in SPLIT_NAMES}
        tags = trust_splits(validated_stamp(args), splits).tags
    summary = run_cv(dataclasses.replace(paths, splits=splits), args.params, folds=args.folds,
                     tags=tags, progress=not args.no_progress)
    print(summary_line(summary, paths.metrics))
    return 0


def _build(args: argparse.Namespace) -> dict[str, Path]:
    """Build ``--source`` into ``--out``/data with the params file's `build` section."""
    from leakpipe.build import run_build

    data = args.out / "data"
    run_build(args.params, args.source, data, args.out / "build.json", group_by=args.group_by,
              progress=not args.no_progress)
    return {s: data / f"{s}.h5" for s in SPLIT_NAMES}
