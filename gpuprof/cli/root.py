"""The ``gpuprof`` app and its root options; every command module registers itself on
:data:`app` (see :mod:`gpuprof.cli`, which loads them)."""

from __future__ import annotations

import typer

from gpuprof.cli.command import App, Group

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
        from gpuprof.util.version import __version__

        print(f"gpuprof {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Where your GPU training time goes, and what to change.

    Add --debug to any command to see a traceback instead of a one-line error.
    """
