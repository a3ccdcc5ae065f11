"""`leakpipe predict`: leak decisions for new recordings (files or folders) with a detector."""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import add_params_argument, positive_int

NAME = "predict"
HELP = "score new recordings (WAV / FLAC / OGG files or folders) with a saved detector"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="recordings, or folders searched recursively for them")
    parser.add_argument("--model", default="models/shipped.pt",
                        help="detector file of any kind, or an MLflow URI such as "
                             "models:/<name>/<version> (default: models/shipped.pt, the kind "
                             "grouped CV selected, written by stage ship; models/detector.pt "
                             "is evaluate's CNN)")
    parser.add_argument("--out", type=Path, default=Path("predictions.csv"),
                        help="CSV with one row per recording (default: predictions.csv); "
                             "<stem>_timeline.csv (one row per long segment), "
                             "<stem>_domain.json (the recordings' domain check as a set) and "
                             "<stem>_detector.json (which detector wrote the rows) go beside "
                             "it. Never one of the recordings; an existing file only with "
                             "--resume or --force")
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument("--resume", action="store_true",
                          help="continue --out: keep the rows it scored with this same detector "
                               "and skip their recordings; failed rows are tried again")
    existing.add_argument("--force", action="store_true",
                          help="replace an existing --out (and the files beside it)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the model runs (default: auto = cuda when available; "
                             "fp16 autocast on CUDA, float32 on CPU)")
    parser.add_argument("--batch-segments", type=positive_int, default=None,
                        help="most segments per forward pass (default: sized from free memory, "
                             "capped by the detector's evaluate.max_batch_segments / "
                             "cpu_max_batch_segments)")
    parser.add_argument("--explain", type=Path, default=None, metavar="DIR",
                        help="also write `leakpipe explain`'s figure and JSON into DIR for every "
                             "recording called LEAK (docs/explain.md)")
    add_params_argument(parser)   # scoring rules for detector files that do not hold them
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from leakpipe.predict.run import run_predict
    from leakpipe.predict.target import check_folder

    if args.explain is not None:     # refused before scoring, not after
        check_folder(args.explain, "--explain")
    code = run_predict(args.paths, args.model, args.out, args.params, device=args.device,
                       resume=args.resume, force=args.force, progress=not args.no_progress,
                       max_batch_segments=args.batch_segments)
    if args.explain is None:
        return code
    from leakpipe.explain.stage import explain_leaks

    return max(code, explain_leaks(args.out, args.model, args.explain, args.params,
                                   device=args.device))
