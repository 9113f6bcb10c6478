"""``python -m ampsclient``: the command-line client (:mod:`ampsclient.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
