"""The ``hypersack`` command's entry point: takes Ctrl-C from the first instant.

It imports nothing heavy itself, so a Ctrl-C that lands while the command line is still
importing (or opening the store) exits 130 with one line instead of a traceback.
"""
from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    try:
        from hypersack.cli import main as cli_main
        return cli_main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
