"""DVC stage `check`: every params.yaml section loads, before any stage removes its outputs."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["check", *sys.argv[1:]]))
