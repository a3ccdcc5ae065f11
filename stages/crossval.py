"""DVC stage `crossval`: grouped cross-validation of the CNN and every baseline over sites."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["cv", *sys.argv[1:]]))
