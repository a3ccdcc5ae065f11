"""`leakpipe plots`: the project's DVC plots as one HTML page that needs no network.

`dvc plots show` loads Vega from a CDN; this page has every figure rendered already
(``leakpipe.plots_page``), so it opens on an offline machine, in a CI artifact or in a mail.
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "plots"
HELP = "render the DVC plots (dvc.yaml) to a self-contained HTML page that works offline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("targets", nargs="*", default=[],
                        help="plot ids or files, as `dvc plots show` takes them (default: all)")
    parser.add_argument("--out", type=Path, default=Path("dvc_plots"),
                        help="folder of the page, written as index.html "
                             "(default: dvc_plots, where `dvc plots show` writes)")
    parser.add_argument("--repo", type=Path, default=Path("."),
                        help="the DVC project (default: the current folder)")


def run(args: argparse.Namespace) -> int:
    from leakpipe.plots_page import write_plots_page

    page = write_plots_page(args.repo, args.out, args.targets)
    print(page)
    return 0
