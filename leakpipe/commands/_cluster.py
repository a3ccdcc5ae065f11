"""``--scheduler`` / ``--chunk``: the options that send `build`, `index` or `cv` to a Dask
cluster."""

from __future__ import annotations

import argparse

from leakpipe.cluster import CHUNK, SCHEDULER_ENV, ClusterSettings, scheduler_address
from leakpipe.commands._common import positive_int


def add_cluster_arguments(parser: argparse.ArgumentParser, *, chunk: bool = True,
                          local: str = "the local pool (build.workers)") -> None:
    """``--scheduler``, and ``--chunk`` for commands whose tasks are chunks of recordings;
    ``local`` says where the command computes without a scheduler."""
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="compute on the Dask cluster of this scheduler (tcp://host:8786); "
                             f"default: ${SCHEDULER_ENV}, else {local}; "
                             "'' computes here. Not a DVC param: the outputs are the "
                             "same (docs/scale-out.md)")
    if chunk:
        parser.add_argument("--chunk", type=positive_int, default=CHUNK, metavar="N",
                            help=f"recordings per cluster task (default {CHUNK}; ignored "
                                 "locally)")


def cluster_settings(args: argparse.Namespace) -> ClusterSettings | None:
    """The cluster to compute on, or None for the local path."""
    address = scheduler_address(args.scheduler)
    return None if address is None else ClusterSettings(address, getattr(args, "chunk", CHUNK))
