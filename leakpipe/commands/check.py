"""`leakpipe check`: load every section of params.yaml (DVC stage `check`, the first one).

DVC deletes a stage's outputs before it runs the stage. A stage that then stops on a bad
param has destroyed the user's model and metrics for nothing. Every stage depends on this
one, which checks the whole file (every section, its cross-field rules, the tune space; no
unknown section, no key given twice, no .inf / .nan) and runs first: a bad value stops
`dvc repro`, `dvc exp run -S` and queued experiments before any other stage starts, so no
output is removed. In dvc.yaml it depends on the whole file (`- params.yaml:`), not on a list
of sections: a new or misspelt section then makes it run again, and stop.

The stamp it writes has the same bytes whatever the params are: a successful check leaves
every downstream stage exactly as stale as its own params make it.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from leakpipe.commands._common import add_params_argument
from leakpipe.config import SECTIONS, check_aux_head, load_section
from leakpipe.files import write_json_atomic

NAME = "check"
HELP = "check every section of params.yaml (the first DVC stage; a bad value stops the run)"
STAMP = {"params": "every section checked"}
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--stamp", type=Path, default=Path("reports/params_checked.json"),
                        help="file written when every section loads (constant content)")


def run(args: argparse.Namespace) -> int:
    sections = {name: load_section(args.params, name) for name in SECTIONS}
    check_aux_head(sections["decision"], sections["train"].leak_aux_weight, str(args.params))
    write_json_atomic(args.stamp, STAMP)
    log.info("check: %s: %d sections valid -> %s", args.params, len(SECTIONS), args.stamp)
    return 0
