"""DVC stage `validate`: check the HDF5 splits; fail before any training on bad data."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["validate", *sys.argv[1:]]))
