"""DVC stage `baselines`: the paper's MFCC baselines and a level-only control against the CNN."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["baselines", *sys.argv[1:]]))
