"""DVC stage `train`: train the detector; `torchrun --nproc-per-node N stages/train.py ...` too."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
