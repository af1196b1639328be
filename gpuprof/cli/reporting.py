"""What ``gpuprof analyze`` does once its options are parsed, and how a command writes a
report out (format, colour, width, the file or stdout).

No typer here: the analyze command (:mod:`gpuprof.cli.analyze`) and the fast option path
(:mod:`gpuprof.cli.fast`) both call :func:`analyze_command`, so that the report, its
output and its errors are the same whichever parsed the command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from gpuprof.cli.console import ColorMode, ReadProgress, is_terminal, say, terminal_width, use_color
from gpuprof.cli.outputs import check_outputs
from gpuprof.cli.streams import write_stdout
from gpuprof.errors import GpuprofError
from gpuprof.util.atomic import is_stdout, write_text_atomic
from gpuprof.util.safetext import visible_text

if TYPE_CHECKING:
    from gpuprof.pipeline.outcome import Outcome

# Past this many files of a folder left out, stderr gets one line with the count (the
# report's warnings still name every file): 10,000 empty files were 10,000 lines.
MAX_SKIP_LINES = 5


def warn_skipped(outcome: Outcome) -> None:
    """Say on stderr which files of a folder were left out: a JSON report on stdout would not.
    They are the outcome's notices of code ``SKIPPED_UNREADABLE`` (not read from the report's
    words); a saved report read back names none (its warnings still list them)."""
    skipped = [n.text for n in outcome.skipped]
    if len(skipped) > MAX_SKIP_LINES:
        say(f"warning: {len(skipped)} files of the input folders cannot be read and were skipped; the first: "
            f"{skipped[0].removeprefix('skipped ')} (the report's warnings name them all)")
        return
    for w in skipped:
        say(f"warning: {w}")


def write_output(text: str, out: Path) -> None:
    """Write a document atomically: a failed run never leaves a half-written file behind.

    Text, Markdown and JUnit (anything but JSON and HTML, which escape what they carry)
    pass through :func:`gpuprof.util.safetext.visible_text` on the way out, as on a terminal."""
    if not out.name.lower().endswith((".json", ".json.gz", ".html", ".htm")):
        text = visible_text(text)
    write_text_atomic(out, text)


def emit(text: str, output: Optional[Path], what: str = "report", keep_color: bool = False) -> None:
    """The result on stdout (``output`` None) or into a file, through the one filter for
    what reaches a person (:mod:`gpuprof.util.safetext`) when it is text or Markdown.

    ``keep_color``: the text holds gpuprof's own colour sequences (``--color``)."""
    if output is None:
        write_stdout(text, f"the {what}", keep_color=keep_color)
    else:
        write_output(text, output)
        say(f"{what} written to {output}")


def text_style(output: Optional[Path], color: ColorMode) -> tuple[int, bool, bool]:
    """``(width, colour, wrap)`` for text going to stdout (``output`` None) or a file: colour
    per ``--color``, wrapped to the terminal's width only on a terminal, so that a CI log
    or a file keeps each finding on one line."""
    if output is None:
        return terminal_width(), use_color(color), is_terminal()
    return 100, color is ColorMode.always, False


def choose_format(fmt: Optional[str], output: Optional[Path]) -> str:
    from gpuprof import render

    if output is not None and output.is_dir():
        raise GpuprofError("is a folder; give a file name to write", output)
    if fmt:
        chosen = render.get(fmt).name  # validates the name (md, HTML and Json name formats too)
        named = render.format_for_path(str(output)) if output is not None else None
        if named is not None and named != chosen:
            # x.json written as HTML would be refused by every tool that reads x.json.
            raise GpuprofError(
                f"the file name says {named} but --format says {chosen}; name the file for {chosen} "
                f"or leave --format out", output,
            )
        return chosen
    if output is not None:
        found = render.format_for_path(str(output))
        if found:
            return found
        if output.exists() and not output.is_file():
            return "text"  # a terminal, a FIFO, /dev/stdout: read as text, like stdout
        raise GpuprofError(
            f"cannot tell the report format from the file name; add --format ({', '.join(render.names())})", output
        )
    return "text"


def annotated_beside(page: Path) -> str | None:
    """The name of ``gpuprof annotate``'s output for this report, when it was written beside
    it as ``<report name>.annotated.json[.gz]`` (the HTML report links it)."""
    from gpuprof.render.html import ANNOTATED_SUFFIXES

    stem = page.name.rsplit(".", 1)[0]
    for suffix in ANNOTATED_SUFFIXES:
        if (page.parent / (stem + suffix)).is_file():
            return stem + suffix
    return None


def analyze_command(
    paths: Sequence[Path],
    fmt: Optional[str] = None,
    output: Optional[Path] = None,
    steps: Optional[str] = None,
    jobs: int = 1,
    scheduler: Optional[str] = None,
    max_input_gb: Optional[float] = None,
    color: ColorMode = ColorMode.auto,
    strict: bool = False,
    brief: bool = False,
    top: int | None = None,
    force: bool = False,
) -> None:
    """``gpuprof analyze`` with its options parsed (see the command's help for each)."""
    from gpuprof.accounting.window import StepSelection
    from gpuprof.pipeline import AnalyzeOptions
    from gpuprof.pipeline.inputs import outcome_of, report_of, route
    from gpuprof.render import render

    if is_stdout(output):
        output = None
    chosen = choose_format(fmt, output)
    if (brief and chosen not in ("text", "markdown")) or (top is not None and chosen == "json"):
        what = "--brief" if brief and chosen not in ("text", "markdown") else "--top"
        raise GpuprofError(f"{what} shapes the text, Markdown and HTML reports; the {chosen} report always holds everything")
    from gpuprof.render.figures import View

    view = View(brief=brief, top=top)
    check_outputs([("an input", p) for p in paths], [("-o", output)])
    inp = route(paths)
    if inp.saved is not None:
        # A report saved with --format json is rendered again (e.g. as HTML) without the traces.
        if steps or jobs != 1 or scheduler:
            raise GpuprofError("--steps, --jobs and --scheduler apply to traces, not to a saved report", inp.saved)
        report = report_of(inp, AnalyzeOptions(max_input_gb=max_input_gb))
    else:
        options = AnalyzeOptions(
            steps=StepSelection.parse(steps), jobs=jobs, scheduler=scheduler, max_input_gb=max_input_gb, strict=strict,
            force=force,
        )
        # A `gpuprof run` session gives the same report as at the end of the run (samples
        # alone when the job left no trace).
        with ReadProgress() as progress:
            outcome = outcome_of(inp, options, progress)
        report = outcome.report
        warn_skipped(outcome)
    if chosen == "text":
        from gpuprof.render.text import render_text

        width, colored, wrap = text_style(output, color)
        text = render_text(report, width, color=colored, wrap=wrap, view=view)
    elif chosen == "html":
        from gpuprof.render.html import render_html

        colored = False
        text = render_html(report, annotated=annotated_beside(output) if output is not None else None, view=view)
    elif chosen == "markdown":
        from gpuprof.render.markdown import render_markdown

        colored = False
        text = render_markdown(report, view=view)
    else:
        colored = False
        text = render(report, chosen, width=100)
    emit(text, output, keep_color=colored)
