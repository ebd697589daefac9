"""`python -m rlpar COMMAND ...`: the `rlpar` command (rlpar/cli.py)."""

import sys

from rlpar.cli import main

if __name__ == "__main__":
    sys.exit(main())
