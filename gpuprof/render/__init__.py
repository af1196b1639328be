"""Renderers: a Report in, text out (text, JSON, Markdown, HTML), plus the report as files
(``save``), as pandas tables (``frames``) and as an annotated trace (``annotate``).

Each renderer registers by name and file extension (:mod:`gpuprof.render.registry`):
``render(report, "json")`` returns the document as a string; ``format_for_path("x.html")``
finds the renderer a ``-o`` file name asks for. ``VIEWS`` is what
:class:`~gpuprof.model.report.Report` calls for ``str(report)``, ``to_html``, ``save`` and
``to_dataframe``: the model finds it by this package's name on first use and never imports
its renderers (``model.report.VIEWS_MODULE``); importing this package changes nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuprof.model.report import Report, ReportViews
from gpuprof.render.registry import RENDERERS, Renderer, format_for_path, get, names, register, render

__all__ = ["VIEWS", "RENDERERS", "Renderer", "format_for_path", "get", "names", "register", "render"]


class _Views:
    def render(self, report: Report, fmt: str, width: int) -> str:
        return render(report, fmt, width)

    def save(self, report: Report, path: Path, fmt: str | None) -> Path:
        from gpuprof.render.save import save_report

        return save_report(report, path, fmt)

    def frame(self, report: Report, kind: str) -> Any:
        from gpuprof.render.frames import frame

        return frame(report, kind)


VIEWS: ReportViews = _Views()
