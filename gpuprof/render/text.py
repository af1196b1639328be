"""The terminal report: what to change first, then where each rank's time went.

Rendered with rich onto a string console, so the same code lays out at any width; colour is
only used when the caller says so (:func:`render_text` ``color=``, from ``--color``). With
``wrap=False`` (a CI log, a file) tables keep the given width but no sentence is broken over
lines: one evidence line, action or warning is one line of output.
Every string taken from a trace is passed to rich as plain :class:`~rich.text.Text`, never
as markup, so a kernel named ``[bold]`` prints as written.
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpuprof.model.report import CAUSES, Report
from gpuprof.render import figures as fg
from gpuprof.render import sample_figures as sf
from gpuprof.render.findings import findings_context, job_blocks, section_title
from gpuprof.render.registry import register
from gpuprof.render.runview import text_section

TOP_RECOMMENDATIONS = 5  # shown with evidence and actions; the rest as one line each
MAX_WARNINGS = 10
WIDE_COLUMNS = 110  # from this width on, the per-rank table has a column per cause
UNWRAPPED_COLUMNS = 100_000  # the console's width when nothing may wrap


def _bullet(marker: str, text: str, style: str, wrap: bool = True) -> RenderableType:
    """An indented bullet whose wrapped lines hang under its text, not under the marker; one
    unbroken line when not wrapping."""
    if not wrap:
        return Text("   ").append(marker, style=style).append(" " + text)
    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(no_wrap=True, style=style)
    grid.add_column()
    grid.add_row(marker, Text(text))
    return Padding(grid, (0, 0, 0, 3))


def _recommendations(report: Report, wrap: bool = True, view: fg.View = fg.FULL) -> list[RenderableType]:
    out: list[RenderableType] = [Text("What to change", style="bold underline")]
    if not report.recommendations:
        out.append(Text(fg.no_recommendation(report), style="dim"))
        return out
    for i, rec in enumerate(view.shown(report), 1):
        out.append(Text(f"{i}. ", style="bold").append(rec.title, style="bold"))
        meta = f"{rec.category.value} · {fg.saving_phrase(rec, report)} · {fg.ranks_phrase(rec.ranks)}"
        out.append(Padding(Text(meta, style="cyan"), (0, 0, 0, 3)) if wrap else Text("   ").append(meta, style="cyan"))
        if i > TOP_RECOMMENDATIONS or view.brief:
            continue
        for ev in rec.evidence:
            out.append(_bullet("-", ev, "dim", wrap))
        for act in rec.actions:
            out.append(_bullet(">", act, "green", wrap))
    if view.hidden(report):
        out.append(Text(f"   ... and {view.hidden(report)} more (without --top)", style="dim"))
    combined = view.combined(report)
    if combined is not None:
        out.append(Text(combined, style="bold"))
    return out


def _table(title: str) -> Table:
    return Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False)


def _rank_table(report: Report, width: int) -> tuple[Table, str | None]:
    """One row per rank; every cause gets a column when the width allows (else the largest)."""
    ranks, note = fg.ranks_to_show(report)
    wide = width >= WIDE_COLUMNS
    table = _table("Per rank (lost time as % of window)")
    for name in ("rank", "steps", f"{fg.STEP_STAT} ms", "window ms", "compute"):
        table.add_column(name, justify="right", no_wrap=True)
    if wide:
        for c in CAUSES:
            table.add_column(fg.CAUSE_SHORT[c], justify="right", no_wrap=True)
    else:
        table.add_column("largest lost causes", justify="left")
    for r in ranks:
        head = [str(r.rank), str(r.steps)]
        if not fg.has_data(r):
            table.add_row(*head, fg.NA, fg.NA, fg.NA, *([fg.NA] * (len(CAUSES) if wide else 1)))
            continue
        head += [fg.fmt_ms(fg.step_time_us(r)), fg.fmt_ms(r.window_us), fg.fmt_pct(fg.compute_pct(r))]
        if wide:
            table.add_row(*head, *[fg.fmt_pct(fg.lost_pct(r, c)) for c in CAUSES])
        else:
            largest = ", ".join(f"{c.value} {v:.1f}%" for c, v in fg.top_causes(r, 3)) or "none"
            table.add_row(*head, largest)
    return table, note


def _totals_table(report: Report) -> Table:
    shares = fg.job_shares(report)
    n = len(report.ranks)
    title = "Totals" + (f" over {n} ranks" if n > 1 else "")
    table = _table(title)
    table.add_column("")
    table.add_column("ms", justify="right")
    table.add_column("% of window", justify="right")
    table.add_row("window", fg.fmt_ms(shares.window_us), fg.fmt_pct(100.0 if shares.window_us > 0 else None))
    table.add_row("compute", fg.fmt_ms(shares.compute_us), fg.fmt_pct(shares.compute_pct))
    for c in CAUSES:
        table.add_row(f"lost: {c.value}", fg.fmt_ms(shares.lost_us[c]), fg.fmt_pct(shares.lost_pct[c]))
    return table


def _samples(report: Report, wrap: bool = True) -> list[RenderableType]:
    rows = sf.gpu_rows(report)
    notes = sf.sample_notes(report)
    if not rows and not notes:
        return []
    out: list[RenderableType] = [Text("GPUs over the run (NVML samples)", style="bold underline")]
    for r in rows:
        line = (
            f"GPU {r.gpu}: mean {fg.fmt_pct(r.mean_pct, 0)}, p90 {fg.fmt_pct(r.p90_pct, 0)}, min {fg.fmt_pct(r.min_pct, 0)}, "
            f"max {fg.fmt_pct(r.max_pct, 0)} over {r.samples} samples; memory peak {fg.fmt_pct(r.mem_peak_pct, 0)}"
        )
        if r.energy_j is not None:
            line += f"; {r.energy_j:,.0f} J"
        if r.lost_at_s is not None:
            line += f"; LOST at {r.lost_at_s:.1f} s"
        out.append(Text(line))
    out.extend(_bullet("-", n, "dim", wrap) for n in notes)
    return out


def _header(report: Report) -> Text:
    shares = fg.job_shares(report)
    head = Text("gpuprof: ", style="bold")
    head.append(f"{fg.fmt_pct(shares.compute_pct)} of GPU time is compute", style="bold")
    head.append(f"  ({fg.scope_phrase(report)})")
    return head


def _findings(report: Report, wrap: bool) -> list[RenderableType]:
    """Cross-rank findings in sentences (their tables are in the JSON and HTML reports)."""
    ctx = findings_context(report)
    sentences = [x for b in job_blocks(report.extra.get("job"), ctx) for x in b.sentences]
    if not sentences:
        return []
    out: list[RenderableType] = [Text(section_title(ctx), style="bold underline")]
    out.extend(_bullet("-", x, "dim", wrap) for x in sentences)
    return out


def _renderables(report: Report, width: int, wrap: bool = True, view: fg.View = fg.FULL) -> list[RenderableType]:
    parts: list[RenderableType] = []
    empty = fg.nothing_to_analyze(report)
    cpu = fg.cpu_only_summary(report)
    if cpu is not None:
        parts.append(Text("gpuprof: " + cpu.headline, style="bold"))
        parts.extend(_bullet("-", line, "dim", wrap) for line in cpu.lines)
    elif empty is not None:
        parts.append(Text("gpuprof: " + empty, style="bold yellow"))
    if empty is not None:
        if report.inputs:
            parts.append(Text("inputs: " + ", ".join(report.inputs), style="dim"))
        samples = _samples(report, wrap)
        if samples:
            parts.append(Text(""))
            parts.extend(samples)
        whole = text_section(report, lambda marker, line, style: _bullet(marker, line, style, wrap))  # a long run: its windows, changes and phases
        if whole:
            parts.append(Text(""))
            parts.extend(whole)
        if report.recommendations:  # advice from NVML samples alone (e.g. periodic idle phases)
            parts.append(Text(""))
            parts.extend(_recommendations(report, wrap))
    else:
        parts.append(_header(report))
        for caveat in fg.report_caveats(report):
            parts.append(Text("  ! ", style="yellow").append(caveat))
        parts.append(Text(""))
        parts.extend(_recommendations(report, wrap, view))
        if view.brief:
            return parts
        parts.append(Text(""))
        table, note = _rank_table(report, width)
        parts.append(table)
        if note:
            parts.append(Text(note, style="dim"))
        parts.append(Text(""))
        parts.append(_totals_table(report))
        findings = _findings(report, wrap)
        if findings:
            parts.append(Text(""))
            parts.extend(findings)
        samples = _samples(report, wrap)
        if samples:
            parts.append(Text(""))
            parts.extend(samples)
        whole = text_section(report, lambda marker, line, style: _bullet(marker, line, style, wrap))
        if whole:
            parts.append(Text(""))
            parts.extend(whole)
    warnings = fg.shown_warnings(report)
    if warnings:
        parts.append(Text(""))
        parts.append(Text("Warnings", style="bold yellow"))
        for w in warnings[:MAX_WARNINGS]:
            parts.append(Text("  ! ", style="yellow").append(w))
        if len(warnings) > MAX_WARNINGS:
            parts.append(Text(f"  ... and {len(warnings) - MAX_WARNINGS} more (see --format json)", style="dim"))
    return parts


def render_text(
    report: Report, width: int = 100, color: bool = False, wrap: bool = True, view: fg.View = fg.FULL
) -> str:
    """The report as terminal text ``width`` columns wide; ANSI colour only if ``color``;
    with ``wrap=False`` no sentence is broken over lines (tables still fit ``width``).
    ``view``: ``brief`` (the headline and the ranked titles with their savings) and ``top``
    (at most that many recommendations)."""
    buf = io.StringIO()
    width = max(40, width)
    console = Console(
        file=buf,
        # Not wrapping: no line is ever broken, tables included (a CI log keeps every row
        # whole); ``width`` still chooses the layout (a column per cause from 110 columns).
        width=width if wrap else UNWRAPPED_COLUMNS,
        force_terminal=color,
        color_system="standard" if color else None,
        no_color=not color,
        highlight=False,
        emoji=False,
        markup=False,
        soft_wrap=False,
    )
    for part in _renderables(report, width, wrap, view):
        console.print(part, soft_wrap=not wrap and isinstance(part, Text))
    # Padding and tables pad lines to the full width; trailing blanks only get in the way
    # of diffs and copy-paste.
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


@register("text")
def render_text_plain(report: Report, width: int = 100) -> str:
    """The text report for a file, a log or ``str(report)``: no colour, no sentence broken
    over lines (only a terminal wraps; the command line asks for that itself)."""
    return render_text(report, width, color=False, wrap=False)
