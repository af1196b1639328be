"""Run the ``gpuprof`` command line in this process, as the console script would.

A fresh interpreter per case costs about a second of imports; in-process, a case costs
only its own work, which is what lets the fuzz test try hundreds of inputs in CI.
"""

from __future__ import annotations

import contextlib
import io
import sys
import traceback
from dataclasses import dataclass


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str
    traceback: str | None  # set when an exception escaped gpuprof's own handling

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_cli(*args: str) -> CliResult:
    """``gpuprof ARGS...`` through :func:`gpuprof.cli.main`; exit code, captured streams."""
    from gpuprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_argv = sys.argv
    sys.argv = ["gpuprof", *args]
    code = 0
    tb: str | None = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception:  # noqa: BLE001 - exactly what the tests look for
        code = 1
        tb = traceback.format_exc()
    finally:
        sys.argv = saved_argv
    return CliResult(code, out.getvalue(), err.getvalue(), tb)
