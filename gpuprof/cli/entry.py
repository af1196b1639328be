"""The ``gpuprof`` console script: answers ``--version`` (``-V``) before importing the command line.

Importing :mod:`gpuprof.cli` loads typer, rich and every command module (~0.15 s); a
version check needs none of it.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] in (["--version"], ["-V"]):
        from gpuprof.util.version import __version__

        print(f"gpuprof {__version__}")
        return
    from gpuprof.cli import main as cli_main

    cli_main()
