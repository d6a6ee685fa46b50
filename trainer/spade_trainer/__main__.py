"""Entry point for ``python -m spade_trainer``."""

import sys

from .cli import run

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
