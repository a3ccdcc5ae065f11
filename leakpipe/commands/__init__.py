"""Subcommands of the `leakpipe` CLI, one module each, discovered by ``leakpipe.cli``.

Each module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.
The DVC stage scripts in stages/ call the same commands, so `dvc repro` and a hand-run
`leakpipe <stage>` behave identically; ``leakpipe.cli.STAGE_COMMANDS`` names those commands
(`leakpipe --help` lists them apart from the tools).
"""
