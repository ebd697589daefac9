"""rlpar command line: `python main.py [group=option ...] [key=value ...]` (Hydra), the same as
`rlpar train ...` once the package is installed (rlpar/cli.py holds both)."""

from rlpar import interrupts

if __name__ == "__main__":  # before any other import: Ctrl-C or SIGTERM during them exits 130 at once
    interrupts.exit_at_once_on_signals()

    import sys

    from rlpar.cli import train

    train(sys.argv[1:])
