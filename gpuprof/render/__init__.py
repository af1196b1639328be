"""Renderers: a Report in, text out. Each renderer registers by name and file extension.

``render(report, "json")`` returns the document as a string; ``format_for_path("x.html")``
finds the renderer a ``-o`` file name asks for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report
from gpuprof.suggest import did_you_mean, match_name


@dataclass(frozen=True)
class Renderer:
    name: str
    extensions: tuple[str, ...]
    render: Callable[[Report, int], str]  # (report, width in columns) -> document


RENDERERS: dict[str, Renderer] = {}


def register(name: str, extensions: tuple[str, ...]) -> Callable[[Callable[[Report, int], str]], Callable[[Report, int], str]]:
    def deco(fn: Callable[[Report, int], str]) -> Callable[[Report, int], str]:
        RENDERERS[name] = Renderer(name, extensions, fn)
        return fn

    return deco


_MODULES = ("gpuprof.render.json", "gpuprof.render.text", "gpuprof.render.markdown", "gpuprof.render.html")


def _load() -> None:
    for name in _MODULES:
        importlib.import_module(name)


def names() -> list[str]:
    _load()
    return sorted(RENDERERS)


def get(name: str) -> Renderer:
    _load()
    found = match_name(name, RENDERERS) or {"md": "markdown", "txt": "text", "htm": "html"}.get(name.strip().lower())
    if found is None:
        raise GpuprofError(f"unknown format {name!r}{did_you_mean(name, RENDERERS)}; choose one of: {', '.join(names())}")
    return RENDERERS[found]


def format_for_path(path: str) -> str | None:
    """The renderer whose extension the file name ends with, or None."""
    _load()
    lower = path.lower()
    for r in RENDERERS.values():
        if any(lower.endswith(ext) for ext in r.extensions):
            return r.name
    return None


def render(report: Report, fmt: str, width: int = 100) -> str:
    return get(fmt).render(report, width)
