"""DVC stage `synth`: write the embedded synthetic recordings and their manifest."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["synth", *sys.argv[1:]]))
