"""DVC stage `field`: write the synthetic field set (unlabelled pool, its truth, check set)."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["field", *sys.argv[1:]]))
