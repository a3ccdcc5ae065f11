"""DVC stage `adapt`: field adaptation of the evaluated detector by pseudo-labelling rounds."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["adapt", *sys.argv[1:]]))
