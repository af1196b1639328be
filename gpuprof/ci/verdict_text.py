"""A :class:`~gpuprof.ci.verdict.Verdict` in words: one line for logs and JUnit, a few lines
for a terminal, a Markdown section for job summaries. The one place the verdict is worded,
so that ``check``, ``diff`` and the API say it the same way.
"""

from __future__ import annotations

from gpuprof.ci.verdict import Kind, PartChange, Verdict
from gpuprof.render import figures as fg
from gpuprof.render.markdown import md_escape
from gpuprof.util import phrases

MAX_CAUSES = 3  # causes named in the one-line form; every one is in the table and the JSON


def _ms(v: float | None, signed: bool = True) -> str:
    if v is None:
        return fg.NA
    digits = 1 if abs(v) >= 10 else 2 if abs(v) >= 0.1 else 3
    text = f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"
    return text.replace("-0.000", "0.000").replace("+0.000", "0.000")


def part_phrase(p: PartChange) -> str:
    """``dataloader +46.9 ms/step [+40.2, +52.8]`` (no interval without per-step data)."""
    if p.low_ms is None or p.high_ms is None:
        return f"{p.name} {_ms(p.change_ms)} ms/step"
    return f"{p.name} {_ms(p.change_ms)} ms/step [{_ms(p.low_ms)}, {_ms(p.high_ms)}]"


def step_phrase(v: Verdict) -> str:
    """``step +6.2% [+4.1%, +8.3%] (99% interval, 120 vs 118 steps)``."""
    runs = f", {v.runs_base} baseline runs" if v.runs_base > 1 else ""
    return (
        f"step {phrases.signed_pct(v.effect_pct)} [{phrases.signed_pct(v.low_pct)}, {phrases.signed_pct(v.high_pct)}] "
        f"({v.settings.confidence_pct:g}% interval, {v.n_current} vs {v.n_base} steps{runs})"
    )


def causes_phrase(v: Verdict, limit: int = MAX_CAUSES) -> str:
    """``grew: dataloader +46.9 ms/step [+40.2, +52.8], host ...`` ('' when none)."""
    causes = v.causes
    if not causes:
        return ""
    word = "grew" if v.kind is Kind.REGRESSION else "dropped"
    shown = ", ".join(part_phrase(p) for p in causes[:limit])
    more = f" (+{len(causes) - limit} more)" if len(causes) > limit else ""
    return f"{word}: {shown}{more}"


def verdict_line(v: Verdict, with_causes: bool = True) -> str:
    """The verdict on one line: what, by how much with the interval, and why."""
    head = v.kind.value
    if v.kind in (Kind.NOT_COMPARABLE, Kind.INCONCLUSIVE):
        tail = ""
        if v.kind is Kind.INCONCLUSIVE:
            tail = " (fails with --strict)" if not v.settings.strict else " (--strict: fails)"
        return f"{head}: {v.reason}{tail}"
    parts = [f"{head}: {step_phrase(v)}"]
    if v.reason:
        parts.append(v.reason)
    if with_causes and causes_phrase(v):
        parts.append(causes_phrase(v))
    return "; ".join(parts)


def verdict_lines(v: Verdict) -> list[str]:
    """The verdict for a terminal: the line, the medians, the causes that moved (every one,
    with its interval), and what the causes' figures rest on."""
    out = [verdict_line(v, with_causes=False)]
    if v.base_median_ms is not None and v.current_median_ms is not None:
        line = f"  median step {_ms(v.base_median_ms, False)} ms -> {_ms(v.current_median_ms, False)} ms"
        if v.p_value is not None:
            line += f", p = {v.p_value:.2g} ({v.method})"
        if v.run_spread_pct is not None:
            line += f"; run-to-run spread of the baseline runs {v.run_spread_pct:.1f}%"
        out.append(line)
    causes = v.causes
    if causes:
        word = "grew" if v.kind is Kind.REGRESSION else "dropped"
        out.append(f"  {word} (time per step, {v.settings.confidence_pct:g}% interval):")
        out += [f"    {part_phrase(p)}" for p in causes]
    if v.parts_note:
        out.append(f"  note: {v.parts_note}")
    if v.kind is Kind.REGRESSION and v.runs_base == 1:
        out.append("  note: one baseline run shows the noise from step to step, not from run to run: "
                   "pool runs (a folder of reports, --history) to see it")  # fmt: skip
    return out


def verdict_markdown(v: Verdict) -> str:
    """A Markdown section: the verdict, then compute and each cause in ms per step."""
    lines = [f"**{md_escape(v.kind.value)}**: {md_escape(verdict_line(v, with_causes=False).split(': ', 1)[1])}", ""]
    if v.parts:
        lines += [
            f"| time per step | baseline | this run | change | {v.settings.confidence_pct:g}% interval |",
            "|---|---:|---:|---:|---|",
        ]
        moved = {p.name for p in v.causes}
        for p in v.parts:
            interval = fg.NA if p.low_ms is None else f"[{_ms(p.low_ms)}, {_ms(p.high_ms)}]"
            name = f"**{md_escape(p.name)}**" if p.name in moved else md_escape(p.name)
            lines.append(
                f"| {name} | {_ms(p.base_ms, False)} ms | {_ms(p.current_ms, False)} ms | {_ms(p.change_ms)} ms | {interval} |"
            )
        lines.append("")
    if v.parts_note:
        lines += [md_escape(f"Note: {v.parts_note}"), ""]
    return "\n".join(lines)
