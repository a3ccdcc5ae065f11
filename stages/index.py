"""DVC stage `index`: content hashes of the recordings build reads (re-run on every repro)."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["index", *sys.argv[1:]]))
