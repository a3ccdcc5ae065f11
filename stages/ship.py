"""DVC stage `ship`: the detector of the kind grouped cross-validation selected."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["ship", *sys.argv[1:]]))
