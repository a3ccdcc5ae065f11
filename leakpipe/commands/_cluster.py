"""``--scheduler`` / ``--chunk``: the options that send `build` or `index` to a Dask cluster."""

from __future__ import annotations

import argparse

from leakpipe.cluster import CHUNK, SCHEDULER_ENV, ClusterSettings, scheduler_address
from leakpipe.commands._common import positive_int


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="compute on the Dask cluster of this scheduler (tcp://host:8786); "
                             f"default: ${SCHEDULER_ENV}, else the local pool (build.workers); "
                             "'' forces the local pool. Not a DVC param: the outputs are the "
                             "same (docs/scale-out.md)")
    parser.add_argument("--chunk", type=positive_int, default=CHUNK, metavar="N",
                        help=f"recordings per cluster task (default {CHUNK}; ignored locally)")


def cluster_settings(args: argparse.Namespace) -> ClusterSettings | None:
    """The cluster to compute on, or None for the local pool."""
    address = scheduler_address(args.scheduler)
    return None if address is None else ClusterSettings(address, args.chunk)
