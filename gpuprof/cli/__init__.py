"""Command line: a thin layer over the pipeline.

Each command lives in its own module and registers itself on :data:`app`. The one place
that turns the project's own error type into a single line on stderr and exit code 2 is
:func:`main`.
"""

from __future__ import annotations

import importlib
import sys

import typer

from gpuprof.cli.command import App, Group
from gpuprof.errors import GpuprofError

app = App(
    name="gpuprof",
    cls=Group,
    help="Where your GPU training time goes, and what to change.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="markdown",
)


def _version(value: bool) -> None:
    if value:
        from gpuprof import __version__

        print(f"gpuprof {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """Where your GPU training time goes, and what to change.

    Add --debug to any command to see a traceback instead of a one-line error.
    """

# Command modules, imported for their side effect of registering on `app`.
_COMMAND_MODULES = (
    "gpuprof.cli.analyze",
    "gpuprof.cli.run",
    "gpuprof.cli.check",
    "gpuprof.cli.diff",
    "gpuprof.cli.annotate",
    "gpuprof.cli.simulate",
    "gpuprof.cli.schema",
)
for _name in _COMMAND_MODULES:
    importlib.import_module(_name)


def main() -> None:
    """Entry point of the ``gpuprof`` console script."""
    # --debug belongs to gpuprof only before `--`: after it, the argument is the wrapped
    # command's own (gpuprof run -- python train.py --debug).
    own = sys.argv[: sys.argv.index("--")] if "--" in sys.argv else sys.argv
    debug = "--debug" in own
    if debug:
        sys.argv.remove("--debug")  # removes the first occurrence, which is gpuprof's
    try:
        rc = app(standalone_mode=False, prog_name="gpuprof")
        # Non-standalone click returns typer.Exit's code instead of exiting.
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except GpuprofError as exc:
        if debug:
            raise
        print(f"gpuprof: {exc}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        # Recognized by shape, never by importing click: typer >= 0.20 bundles its own copy
        # of click (and no longer depends on the package), older typer raises click's own
        # classes; both have these attributes.
        if type(exc).__name__ == "Abort":
            sys.exit(130)
        message = getattr(exc, "format_message", None)
        if callable(message) and isinstance(getattr(exc, "exit_code", None), int):
            print(usage_line(exc), file=sys.stderr)
            sys.exit(2)
        raise


def usage_line(exc: Exception) -> str:
    """A click usage error as one line: the command, the problem, where to find help."""
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "gpuprof"
    text = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    hint = f" (see '{path} --help')" if ctx is not None else ""
    return f"{path}: {text}{hint}"
