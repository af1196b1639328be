"""Help in the conventions of command-line tools: ``Usage: gpuprof analyze [OPTIONS] PATH...``
and ``-o, --output FILE``, never typer's type placeholders (``<list[Path]>``, ``<bool>``,
``{paths}...``).

Every command and the root group use these classes (:class:`App` makes them the default),
so a new command gets the same help without doing anything. Values show their metavar
(given where the command declares the option; the option's name in capitals otherwise),
flags show nothing.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any, Callable

import typer
from typer.core import TyperCommand, TyperGroup


def _metavar_for(param: Any) -> str:
    """A metavar for an option that declares none: its unit (``--max-step-ms MS``), else its
    kind of value (``N``, ``NUMBER``, ``PATH``), else its name in capitals."""
    name = (param.name or "value").lower()
    for suffix, metavar in (("_pct", "PCT"), ("_ms", "MS"), ("_s", "SECONDS")):
        if name.endswith(suffix):
            return metavar
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is int:
        return "N"
    if annotation is float:
        return "NUMBER"
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "PATH"
    return name.upper()


def _plain(param: Any) -> Any:
    """Make one parameter show its metavar in help instead of a type placeholder."""
    if getattr(param, "_gpuprof_plain", False):
        return param
    if param.param_type_name == "argument":
        if param.metavar is None:  # PATHS... rather than paths..., in help, usage and errors
            param.metavar = (param.name or "arg").upper() + ("..." if param.nargs != 1 else "")
        param.display_type_rich = lambda ctx=None: None
    elif getattr(param, "is_flag", False) or getattr(param, "count", False):
        param.display_type_rich = lambda ctx=None: None
    else:
        metavar = param.metavar or _metavar_for(param)
        param.display_type_rich = lambda ctx=None, m=metavar: m
    param._gpuprof_plain = True
    return param


def _usage(cmd: Any, ctx: Any) -> list[str]:
    pieces = [cmd.options_metavar] if cmd.options_metavar else []
    for p in cmd.get_params(ctx):
        if p.param_type_name != "argument":
            continue
        name = p.metavar or (p.name or "arg").upper() + ("..." if p.nargs != 1 else "")
        pieces.append(name if p.required or name.startswith("[") else f"[{name}]")
    return pieces


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return [_plain(p) for p in super().get_params(ctx)]

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage(self, ctx)


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return [_plain(p) for p in super().get_params(ctx)]


class App(typer.Typer):
    """``typer.Typer`` whose commands default to :class:`Command`."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Callable[..., Any]:
        return super().command(*args, cls=cls or Command, **kwargs)


def input_path(value: str) -> Path:
    """A PATH argument, as typer reads it, but never empty: ``Path("")`` is the current folder,
    and an unset ``"$TRACES"`` would analyze whatever is there (exit 2 instead)."""
    if not str(value).strip():
        raise typer.BadParameter("an empty path was given (an unset variable?): name a trace file or folder")
    return Path(value)
