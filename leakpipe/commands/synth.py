"""`leakpipe synth`: generate the embedded synthetic recordings (DVC stage `synth`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import add_params_argument

NAME = "synth"
SCENARIOS = ("benchmark", "small_network")  # synth.scenario
HELP = "generate synthetic pipe recordings (WAV) and their manifest.csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--out", type=Path, default=Path("data/raw"),
                        help="output folder (replaced on success)")
    parser.add_argument("--scenario", choices=SCENARIOS,
                        help="what to render instead of synth.scenario: the benchmark or a small "
                             "utility-like network (docs/synth.md#the-small-network-scenario)")
    parser.add_argument("--seed", type=int, help="instead of synth.seed")
    parser.add_argument("--network-sites", type=int,
                        help="instead of synth.network_sites (small_network)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from leakpipe.audio.synth import run_synth, synth_config

    cfg = synth_config(args.params, scenario=args.scenario, seed=args.seed,
                       network_sites=args.network_sites)
    progress = not args.no_progress
    if cfg.scenario == "small_network":
        from leakpipe.audio.network import generate_network

        return run_synth(cfg, args.out, generate_network, progress=progress)
    return run_synth(cfg, args.out, progress=progress)
