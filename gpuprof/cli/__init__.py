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
from typing import TYPE_CHECKING, Any

from gpuprof.cli.streams import SIGPIPE_EXIT, guarded_streams
from gpuprof.errors import GpuprofError
from gpuprof.util.atomic import OutputClosed, silence_fd

if TYPE_CHECKING:
    from typer import Typer

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
    "trigger": "gpuprof.cli.trigger",
}


def load_commands(argv: Sequence[str] | None = None) -> Typer:
    """Register the command ``argv`` names (its first word that is not an option), or every
    command when it names none, and return the app."""
    from gpuprof.cli.root import app as _app  # typer, imported here: the fast path goes without

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
    if sys.argv[1:2] != ["run"]:
        limit_blas_threads()
    complete = os.environ.get("_GPUPROF_COMPLETE")
    if complete is not None and not _completion_instruction(complete):
        # click would say "Invalid completion instruction." and exit 1: in CI, 1 is a failed check.
        _say(f"_GPUPROF_COMPLETE={complete[:40]!r}: not a completion instruction "
             "(bash_source, zsh_complete, ...); unset it to run gpuprof")
        sys.exit(2)
    try:
        # An analyze command line of plain options is parsed without typer (its import and
        # set-up are a third of a small analysis); anything else goes to typer.
        from gpuprof.cli import fast

        rc = fast.analyze(sys.argv[1:])
        if rc is fast.NOT_HANDLED:
            rc = load_commands(sys.argv[1:])(standalone_mode=False, prog_name="gpuprof")
        # Non-standalone click returns typer.Exit's code instead of exiting.
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except OutputClosed:
        # The reader of stdout went away (| head): nothing more to say to anyone.
        sys.exit(SIGPIPE_EXIT)
    except GpuprofError as exc:
        if debug:
            # The traceback asked for, and still the exit code of bad input: 1 would read as
            # "check failed" to a CI job.
            import traceback

            traceback.print_exc()
        _say(exc)
        sys.exit(2)
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
        code = getattr(exc, "exit_code", None)
        if type(exc).__name__ == "Exit" and isinstance(code, int):
            sys.exit(code)  # typer.Exit
        if type(exc).__name__ == "Abort":
            sys.exit(130)
        message = getattr(exc, "format_message", None)
        if callable(message) and isinstance(getattr(exc, "exit_code", None), int):
            _say(usage_line(exc), prefix="")
            sys.exit(2)
        raise


COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _completion_instruction(value: str) -> bool:
    """Whether ``_GPUPROF_COMPLETE`` holds what shell completion sets (click's
    ``SHELL_source``/``SHELL_complete``, typer's ``complete_SHELL``/``source_SHELL``); an empty
    value means none."""
    if not value:
        return True
    first, _, second = value.partition("_")
    modes = ("source", "complete")
    return (first in COMPLETION_SHELLS and second in modes) or (first in modes and second in COMPLETION_SHELLS)


def _say(text: object, prefix: str = "gpuprof: ") -> None:
    from gpuprof.cli.console import say  # rich, loaded only when there is something to say

    say(text, prefix=prefix)


# Thread pools of the BLAS libraries numpy may be built with. gpuprof does no BLAS work, and
# OpenBLAS starting one thread per core at `import numpy` costs 0.03-0.1 s of a small
# analysis (more on a busy machine).
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def limit_blas_threads() -> None:
    """One BLAS thread for gpuprof's own process and its workers, where the user has not
    chosen a number. Never for ``gpuprof run``: the job it starts inherits the environment."""
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


# What a bare ``gpuprof`` (or a bare group) says under its help: where to start.
NO_COMMAND = "give a command: gpuprof analyze TRACE_OR_FOLDER to start, gpuprof run -- CMD to record a job"


def usage_line(exc: Exception) -> str:
    """A click usage error as one line: the command, the problem, where to find help. A
    bare ``gpuprof`` (click's help with an empty message) says where to start."""
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "gpuprof"
    text = " ".join(str(exc.format_message()).split()) or NO_COMMAND  # type: ignore[attr-defined]
    hint = f" (see '{path} --help')" if ctx is not None else ""
    return f"{path}: {text}{hint}"
