"""Command line: a thin layer over the pipeline.

Each command lives in its own module and registers itself on :data:`app`. The one place
that turns the project's own error type into a single line on stderr and exit code 2 is
:func:`main`; what gpuprof does with closed, full and broken standard streams is
:mod:`gpuprof.cli.streams`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer import Typer

from gpuprof.atomic import OutputClosed, silence_fd
from gpuprof.cli.root import app as _app
from gpuprof.cli.streams import SIGPIPE_EXIT, guarded_streams
from gpuprof.errors import GpuprofError

# Command modules, imported for their side effect of registering on the app: by the command
# line only the one it runs (its imports are most of a small analysis's start-up), all of
# them for help, completion or an unknown name; by ``from gpuprof.cli import app``, all.
_COMMAND_MODULES = {
    "analyze": "gpuprof.cli.analyze",
    "run": "gpuprof.cli.run",
    "check": "gpuprof.cli.check",
    "diff": "gpuprof.cli.diff",
    "annotate": "gpuprof.cli.annotate",
    "simulate": "gpuprof.cli.simulate",
    "schema": "gpuprof.cli.schema",
}


def load_commands(argv: Sequence[str] | None = None) -> Typer:
    """Register the command ``argv`` names (its first word that is not an option), or every
    command when it names none, and return the app."""
    words = [a for a in (argv or ()) if not a.startswith("-")]
    wanted = _COMMAND_MODULES.get(words[0]) if words and argv is not None else None
    if wanted is not None and not os.environ.get("_GPUPROF_COMPLETE"):
        importlib.import_module(wanted)
    else:
        for name in _COMMAND_MODULES.values():
            importlib.import_module(name)
    return _app


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole command line, as a typer app (tests, documentation tools)
        return load_commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Entry point of the ``gpuprof`` console script."""
    with guarded_streams():
        _main()


def _main() -> None:
    # --debug belongs to gpuprof only before `--`: after it, the argument is the wrapped
    # command's own (gpuprof run -- python train.py --debug).
    own = sys.argv[: sys.argv.index("--")] if "--" in sys.argv else sys.argv
    debug = "--debug" in own
    if debug:
        sys.argv.remove("--debug")  # removes the first occurrence, which is gpuprof's
    try:
        rc = load_commands(sys.argv[1:])(standalone_mode=False, prog_name="gpuprof")
        # Non-standalone click returns typer.Exit's code instead of exiting.
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except OutputClosed:
        # The reader of stdout went away (| head): nothing more to say to anyone.
        sys.exit(SIGPIPE_EXIT)
    except GpuprofError as exc:
        if debug:
            raise
        _say(exc)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # a write to stdout outside gpuprof's own (a library's print)
        silence_fd(sys.stdout)
        sys.exit(SIGPIPE_EXIT)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        # Recognized by shape, never by importing click: typer >= 0.20 bundles its own copy
        # of click (and no longer depends on the package), older typer raises click's own
        # classes; both have these attributes.
        if type(exc).__name__ == "Abort":
            sys.exit(130)
        message = getattr(exc, "format_message", None)
        if callable(message) and isinstance(getattr(exc, "exit_code", None), int):
            _say(usage_line(exc), prefix="")
            sys.exit(2)
        raise


def _say(text: object, prefix: str = "gpuprof: ") -> None:
    from gpuprof.cli.console import say  # rich, loaded only when there is something to say

    say(text, prefix=prefix)


def usage_line(exc: Exception) -> str:
    """A click usage error as one line: the command, the problem, where to find help."""
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "gpuprof"
    text = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    hint = f" (see '{path} --help')" if ctx is not None else ""
    return f"{path}: {text}{hint}"
