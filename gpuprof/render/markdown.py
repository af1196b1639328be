"""The Markdown report: sized for a pull-request comment or a CI job summary.

Compact tables, the top recommendations with their evidence folded into ``<details>``.
Every string from a trace is escaped for both HTML (GitHub renders inline HTML) and
Markdown table syntax, so a kernel name can neither inject markup nor break a table.
"""

from __future__ import annotations

import html

from gpuprof.model.report import CAUSES, Report
from gpuprof.render import figures as fg
from gpuprof.render import sample_figures as sf
from gpuprof.render.findings import findings_context, job_blocks, section_title
from gpuprof.render.registry import register
from gpuprof.render.runview import md_section

TOP_RECOMMENDATIONS = 3  # with evidence; the rest as one line each
MAX_WARNINGS = 10


def md_escape(text: object) -> str:
    """Plain text safe inside Markdown paragraphs, lists and table cells."""
    s = html.escape(str(text), quote=False)  # <, >, & only: quotes are safe in Markdown text
    for ch in ("\\", "`", "*", "_", "[", "]", "|"):
        s = s.replace(ch, "\\" + ch)
    # A newline would end a table row or a list item.
    return " ".join(s.splitlines())


def _recommendations(report: Report, view: fg.View = fg.FULL) -> list[str]:
    out = ["#### What to change", ""]
    if not report.recommendations:
        return out + [md_escape(fg.no_recommendation(report)), ""]
    for i, rec in enumerate(view.shown(report), 1):
        out.append(
            f"{i}. **{md_escape(rec.title)}** — {md_escape(fg.saving_phrase(rec, report))} "
            f"(`{rec.category.value}`, {md_escape(fg.ranks_phrase(rec.ranks))})"
        )
        if i <= TOP_RECOMMENDATIONS and not view.brief and (rec.evidence or rec.actions):
            out.append("   <details><summary>Evidence and what to try</summary>")
            out.append("")
            out.extend(f"   - {md_escape(e)}" for e in rec.evidence)
            if rec.actions:
                out.append("")
                out.append("   **Try:**")
                out.append("")
                out.extend(f"   - {md_escape(a)}" for a in rec.actions)
            out.append("")
            out.append("   </details>")
    if view.hidden(report):
        out += ["", f"... and {view.hidden(report)} more (without --top)"]
    combined = view.combined(report)
    if combined is not None:
        out += ["", f"**{md_escape(combined)}**"]
    out.append("")
    return out


def _totals(report: Report) -> list[str]:
    s = fg.job_shares(report)
    head = "| | " + " | ".join(["compute"] + [c.value for c in CAUSES]) + " |"
    sep = "|---|" + "---:|" * (1 + len(CAUSES))
    ms = "| ms | " + " | ".join([fg.fmt_ms(s.compute_us)] + [fg.fmt_ms(s.lost_us[c]) for c in CAUSES]) + " |"
    pct = "| % | " + " | ".join([fg.fmt_pct(s.compute_pct)] + [fg.fmt_pct(s.lost_pct[c]) for c in CAUSES]) + " |"
    return ["#### Where the time went (all ranks)", "", head, sep, ms, pct, ""]


def _ranks(report: Report) -> list[str]:
    ranks, note = fg.ranks_to_show(report)
    out = ["<details><summary>Per rank</summary>", ""]
    out.append(f"| rank | steps | {fg.STEP_STAT} ms | compute | " + " | ".join(fg.CAUSE_SHORT[c] for c in CAUSES) + " |")
    out.append("|---:|---:|---:|---:|" + "---:|" * len(CAUSES))
    for r in ranks:
        if not fg.has_data(r):
            cells = [fg.NA] * (2 + len(CAUSES))
        else:
            cells = [fg.fmt_ms(fg.step_time_us(r)), fg.fmt_pct(fg.compute_pct(r))]
            cells += [fg.fmt_pct(fg.lost_pct(r, c)) for c in CAUSES]
        out.append(f"| {r.rank} | {r.steps} | " + " | ".join(cells) + " |")
    if note:
        out += ["", md_escape(note)]
    out += ["", "</details>", ""]
    return out


def _findings(report: Report) -> list[str]:
    """The cross-rank findings in sentences, folded (their numbers are in the JSON report)."""
    ctx = findings_context(report)
    sentences = [x for b in job_blocks(report.extra.get("job"), ctx) for x in b.sentences]
    if not sentences:
        return []
    return [f"<details><summary>{section_title(ctx)}</summary>", ""] + [f"- {md_escape(x)}" for x in sentences] + ["", "</details>", ""]


def _samples(report: Report) -> list[str]:
    rows = sf.gpu_rows(report)
    notes = sf.sample_notes(report)
    if not rows and not notes:
        return []
    out = ["#### GPUs over the run (NVML samples)", ""]
    if rows:
        out += ["| GPU | samples | mean | p90 | min | max | memory peak |", "|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            out.append(
                f"| {md_escape(r.gpu)} | {r.samples} | {fg.fmt_pct(r.mean_pct, 0)} | {fg.fmt_pct(r.p90_pct, 0)} | "
                f"{fg.fmt_pct(r.min_pct, 0)} | {fg.fmt_pct(r.max_pct, 0)} | {fg.fmt_pct(r.mem_peak_pct, 0)} |"
            )
        out.append("")
    out += [f"- {md_escape(n)}" for n in notes]
    return out + [""]


def render_markdown(report: Report, width: int = 100, view: fg.View = fg.FULL) -> str:
    """The report as GitHub-flavoured Markdown (``width`` is unused: Markdown reflows);
    ``view`` as for the text report."""
    lines: list[str] = []
    empty = fg.nothing_to_analyze(report)
    cpu = fg.cpu_only_summary(report)
    if cpu is not None:
        lines += [f"### gpuprof: {md_escape(cpu.headline)}", ""] + [f"- {md_escape(x)}" for x in cpu.lines] + [""]
    elif empty is not None:
        lines += [f"### gpuprof: {md_escape(empty)}", ""]
    if empty is not None:
        lines += _samples(report)
        lines += md_section(report, md_escape)
    else:
        s = fg.job_shares(report)
        lines += [
            f"### gpuprof: {fg.fmt_pct(s.compute_pct)} of GPU time is compute ({md_escape(fg.scope_phrase(report))})",
            "",
        ]
        lines += [f"> **Note:** {md_escape(c)}" for c in fg.report_caveats(report)]
        if fg.report_caveats(report):
            lines.append("")
        lines += _recommendations(report, view)
        if view.brief:
            return "\n".join(lines).rstrip() + "\n"
        lines += _totals(report)
        lines += _ranks(report)
        lines += _findings(report)
        lines += _samples(report)
        lines += md_section(report, md_escape)
    warnings = fg.shown_warnings(report)
    if warnings:
        lines += ["<details><summary>Warnings</summary>", ""]
        lines += [f"- {md_escape(w)}" for w in warnings[:MAX_WARNINGS]]
        if len(warnings) > MAX_WARNINGS:
            lines.append(f"- ... and {len(warnings) - MAX_WARNINGS} more (see the JSON report)")
        lines += ["", "</details>", ""]
    return "\n".join(lines).rstrip() + "\n"


@register("markdown")
def _render(report: Report, width: int = 100) -> str:
    return render_markdown(report, width)
