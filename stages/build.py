"""DVC stage `build`: recordings -> two-stage-segmented log-mel HDF5 per split."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["build", *sys.argv[1:]]))
