"""`leakpipe build`: recordings -> segmented log-mel HDF5 per split (DVC stage `build`)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

from leakpipe import tracking
from leakpipe.commands._common import add_params_argument
from leakpipe.config import load_section
from leakpipe.data.manifest import GROUP_BY
from leakpipe.files import write_json_atomic

NAME = "build"
HELP = "segment recordings into two-stage log-mel HDF5 files (train / val / test)"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--source", type=Path, default=None,
                        help="manifest CSV or recordings folder (default: build.source)")
    parser.add_argument("--group-by", choices=GROUP_BY, default=None,
                        help="folder sources: which files share a group (default: "
                             "build.group_by; see docs/data-format.md)")
    parser.add_argument("--out-dir", type=Path, default=Path("data/processed"),
                        help="folder for train.h5 / val.h5 / test.h5")
    parser.add_argument("--report", type=Path, default=Path("reports/build.json"),
                        help="JSON report: counts, unusable files, timing")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from leakpipe.build import BuildFailed, build

    cfg = load_section(args.params, "build")
    if args.group_by is not None:
        cfg = dataclasses.replace(cfg, group_by=args.group_by)
    source = args.source or Path(cfg.source)
    with tracking.start_run(NAME) as run:
        run.log_params({"build": {**dataclasses.asdict(cfg), "source": str(source)}})
        try:
            report = build(cfg, source, args.out_dir, progress=not args.no_progress)
        except BuildFailed as exc:
            failed = args.report.with_name(args.report.stem + ".failed.json")
            write_json_atomic(failed, exc.report.to_dict())
            raise BuildFailed(exc.report, f"{exc} (full list: {failed})") from None
        info = report.to_dict()
        run.set_tags({tracking.TAG_DATA: _short_digest(info["sha256"])})
        run.log_metrics({"build/recordings": info["n_recordings"],
                         "build/unusable": info["n_unusable"],
                         "build/flagged": info["n_flagged"],
                         "build/seconds": info["seconds"],
                         "build/recordings_per_s": info["recordings_per_s"] or 0.0,
                         **{f"build/clips_{s}": n for s, n in info["clips"].items()}})
        run.log_dict(info, "build_report.json")
    write_json_atomic(args.report, info)
    log.info("build: %d recordings (%s clips) -> %s in %.1f s, %d unusable",
             info["n_recordings"], info["clips"], args.out_dir, info["seconds"],
             info["n_unusable"])
    return 0


def _short_digest(digests: dict[str, str]) -> str:
    return "-".join(f"{split}:{digest[:12]}" for split, digest in sorted(digests.items()))
