"""DVC stage `evaluate`: operating point chosen on val, file-level metrics and plots on test."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
