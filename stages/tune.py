"""DVC stage `tune`: an Optuna study over the train stage's fit(); writes the best params."""

import sys

from leakpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["tune", *sys.argv[1:]]))
