"""Writing a report to a file, in the format its name asks for (``Report.save``, ``-o``)."""

from __future__ import annotations

from pathlib import Path

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report
from gpuprof.render import registry as render
from gpuprof.util.atomic import utf8, write_atomic
from gpuprof.util.safetext import visible_text


def save_report(report: Report, path: Path, fmt: str | None = None) -> Path:
    """Write ``report`` to ``path`` atomically, in ``fmt`` or the format its extension names
    (``.json``, ``.json.gz`` compressed, ``.html``, ``.md``, ``.txt``); returns ``path``.

    A name whose extension names no format, with no ``fmt``, is a :class:`GpuprofError`
    naming the file (never a guess)."""
    gz = path.name.lower().endswith(".gz")
    named = render.format_for_path(path.name[:-3] if gz else path.name)
    chosen = render.get(fmt).name if fmt else named
    if chosen is None:
        raise GpuprofError(
            f"cannot tell the report format from the file name; give format= ({', '.join(render.names())})", path
        )
    if gz and chosen != "json":
        raise GpuprofError(f"only the JSON report is written compressed, not {chosen}", path)
    text = render.render(report, chosen)
    if chosen not in ("json", "html"):  # the one filter for what a person reads (gpuprof/util/safetext.py)
        text = visible_text(text)
    write_atomic(path, [utf8(text)], gz=gz)
    return path
