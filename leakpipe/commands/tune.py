"""`leakpipe tune`: an Optuna study over the train stage's fit() (DVC stage `tune`).

    leakpipe tune                      run / resume the study to its budget (the DVC stage)
    leakpipe tune --workers 2          ... with 2 local worker processes on the study
    leakpipe tune --worker             join an existing study (another machine, same storage)
    leakpipe tune apply [--dry-run]    write tuning/best_params.yaml into params.yaml
    leakpipe tune dashboard [--port N] optuna-dashboard on the study's page (127.0.0.1:8080)

`apply` and `dashboard` are subcommands with options of their own (`leakpipe tune dashboard
--help` lists only the dashboard's); the study's options belong to `leakpipe tune` itself (and
to `leakpipe tune run`, the same thing spelt out). Nothing changes params.yaml without `tune
apply`; it prints the equivalent ``dvc exp run -S ...`` line as well. See docs/tuning.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from leakpipe.commands._common import (
    add_params_argument,
    add_validated_arguments,
    positive_int,
    validated_stamp,
)
from leakpipe.tune.names import DASHBOARD_HOST, DASHBOARD_PORT

NAME = "tune"
HELP = "search hyper-parameters with Optuna over the train stage's fit(); `tune apply` them"
RUN, APPLY, DASHBOARD = "run", "apply", "dashboard"
JOURNAL_HELP = ("journal file of the study when no RDB storage is configured (relative = under "
                "the repo root)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    actions = parser.add_subparsers(
        dest="action", metavar="ACTION", title="actions (default: run the study)",
        description="`leakpipe tune ACTION --help` lists an action's own options")
    run = actions.add_parser(RUN, help="run / resume the study to its budget (the default)",
                             description="Run / resume the study to its budget (as plain "
                                         "`leakpipe tune`; the DVC stage).")
    add_run_arguments(run)
    apply = actions.add_parser(APPLY, help="write the best trial's values into the params file",
                               description="Write the best trial's values "
                                           "(tuning/best_params.yaml) into params.yaml, "
                                           "comments kept.")
    add_params_argument(apply)
    apply.add_argument("--best", type=Path, default=Path("tuning/best_params.yaml"),
                       help="best trial's values, written by the study")
    apply.add_argument("--dry-run", action="store_true",
                       help="show the changes and the dvc line, change nothing")
    dashboard = actions.add_parser(DASHBOARD, help="optuna-dashboard on the study's storage",
                                   description="optuna-dashboard on the study's storage; prints "
                                               "the address of the study's own page.")
    add_params_argument(dashboard)
    dashboard.add_argument("--journal", type=Path, default=Path("tuning/journal.log"),
                           help=JOURNAL_HELP)
    dashboard.add_argument("--study", default=None,
                           help="the study to open on (default: the newest in the storage)")
    dashboard.add_argument("--host", default=DASHBOARD_HOST,
                           help=f"address to bind (default: {DASHBOARD_HOST}, this machine only)")
    dashboard.add_argument("--port", type=int, default=DASHBOARD_PORT,
                           help=f"port (default: {DASHBOARD_PORT})")
    for sub in (run, apply, dashboard):       # `leakpipe tune -v ACTION` sets it too
        sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                         help="debug logging")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The study's options: on `leakpipe tune` itself and on `leakpipe tune run`."""
    add_params_argument(parser)
    parser.add_argument("--train", type=Path, default=Path("data/processed/train.h5"),
                        help="train split (HDF5)")
    parser.add_argument("--val", type=Path, default=Path("data/processed/val.h5"),
                        help="validation split (HDF5): every trial's objective")
    parser.add_argument("--plan", type=Path, default=Path("reports/preload.json"),
                        help="the preload stage's memory plan")
    parser.add_argument("--journal", type=Path, default=Path("tuning/journal.log"),
                        help=JOURNAL_HELP)
    parser.add_argument("--best", type=Path, default=Path("tuning/best_params.yaml"),
                        help="best trial's values (read by `tune apply`)")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/tune.json"),
                        help="study metrics (DVC metrics file)")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="local worker processes (default: tune.workers)")
    parser.add_argument("--worker", action="store_true",
                        help="join an existing study as one worker (e.g. on another machine)")
    parser.add_argument("--worker-index", type=int, default=None,
                        help="this worker's index (seeds its sampler; default: the pid)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch CPU threads of a worker (default: tune.threads_per_worker)")
    parser.add_argument("--study", default=None,
                        help="study name to join (default: from the params, data and code)")
    add_validated_arguments(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    if args.action == DASHBOARD:
        from leakpipe.tune.dashboard import run_dashboard

        return run_dashboard(args.params, args.journal, args.host, args.port, args.study)
    if args.action == APPLY:
        from leakpipe.tune.apply import run_apply

        return run_apply(args.params, args.best, dry_run=args.dry_run)
    from leakpipe.tune.driver import TunePaths, join_study, run_tune

    paths = TunePaths(train=args.train, val=args.val, plan=args.plan, journal=args.journal,
                      best=args.best, metrics=args.metrics, validated=validated_stamp(args))
    if args.worker:
        join_study(args.params, paths, worker_index=args.worker_index, threads=args.threads,
                   name=args.study)
        return 0
    return run_tune(args.params, paths, workers=args.workers, progress=not args.no_progress)
