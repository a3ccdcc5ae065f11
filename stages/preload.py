"""DVC stage `preload`: plan where training keeps its data from measured memory."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["preload", *sys.argv[1:]]))
