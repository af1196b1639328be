"""The renderers' registry: each renderer registers by name and file extension.

``render(report, "json")`` returns the document as a string; ``format_for_path("x.html")``
finds the renderer a ``-o`` file name asks for. A format from elsewhere (a plug-in) is one
``@register("name", (".ext",))`` on a function ``(report, width) -> str``; once its module
is imported, ``--format name`` and ``-o x.ext`` find it like a built-in one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report
from gpuprof.util.suggest import did_you_mean, match_name


@dataclass(frozen=True)
class Renderer:
    name: str
    extensions: tuple[str, ...]
    render: Callable[[Report, int], str]  # (report, width in columns) -> document


RENDERERS: dict[str, Renderer] = {}


# Each format's module (it registers the renderer of that name) and the file name endings it
# registers: a format is imported when it is asked for, by name or by a ``-o`` file name, so
# that a JSON report never loads rich (the text renderer) or the charts (HTML). Listing the
# formats loads them all. A built-in module registers with its name alone (:func:`register`).
_MODULES = {
    "json": "gpuprof.render.json",
    "text": "gpuprof.render.text",
    "markdown": "gpuprof.render.markdown",
    "html": "gpuprof.render.html",
}
_EXTENSIONS = {
    "json": (".json",),
    "text": (".txt",),
    "markdown": (".md", ".markdown"),
    "html": (".html", ".htm"),
}


def register(
    name: str, extensions: tuple[str, ...] | None = None
) -> Callable[[Callable[[Report, int], str]], Callable[[Report, int], str]]:
    """Register a renderer by name; a built-in format's file endings come from the table
    above, so that they are written once."""
    endings = extensions if extensions is not None else _EXTENSIONS[name]

    def deco(fn: Callable[[Report, int], str]) -> Callable[[Report, int], str]:
        RENDERERS[name] = Renderer(name, endings, fn)
        return fn

    return deco


_ALIASES = {"md": "markdown", "txt": "text", "htm": "html"}


def _load() -> None:
    for module in _MODULES.values():
        importlib.import_module(module)


def names() -> list[str]:
    _load()
    return sorted(RENDERERS)


def get(name: str) -> Renderer:
    found = match_name(name, [*_MODULES, *RENDERERS]) or _ALIASES.get(name.strip().lower())
    if found is None:
        _load()
        raise GpuprofError(f"unknown format {name!r}{did_you_mean(name, RENDERERS)}; choose one of: {', '.join(names())}")
    if found in _MODULES:
        importlib.import_module(_MODULES[found])
    return RENDERERS[found]


def format_for_path(path: str) -> str | None:
    """The renderer whose extension the file name ends with, or None. Only that format's
    module is imported (a renderer registered from elsewhere is found once it is loaded)."""
    lower = path.lower()
    for r in RENDERERS.values():
        if any(lower.endswith(ext) for ext in r.extensions):
            return r.name
    for name, extensions in _EXTENSIONS.items():
        if any(lower.endswith(ext) for ext in extensions):
            importlib.import_module(_MODULES[name])
            return name
    return None


def render(report: Report, fmt: str, width: int = 100) -> str:
    return get(fmt).render(report, width)
