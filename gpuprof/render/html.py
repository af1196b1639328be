"""The HTML report: one self-contained page that opens offline and can be shared as a file.

No CDN, no external file, no script: CSS is inline and the charts are SVG generated here.
Traces are untrusted, so every string that comes from a trace or a report goes through
:func:`e` (``html.escape``) before it reaches the page, no attribute is ever built from data
except escaped ``<title>``/text content and numbers, and a Content-Security-Policy forbids
scripts altogether as a second line of defence. The report itself is embedded as JSON in a
``<script type="application/json">`` block (never executed) with ``<``, ``>`` and ``&``
written as JSON unicode escapes, so no string can close the block.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence

from gpuprof.model.report import CAUSES, Cause, Report, report_to_dict
from gpuprof.render import charts as ch
from gpuprof.render import figures as fg
from gpuprof.render import sample_figures as sf
from gpuprof.render.findings import findings_context, job_blocks, section_title
from gpuprof.render.jsontables import Table
from gpuprof.render.palette import CAUSE_COLORS, text_color_on
from gpuprof.render.registry import register
from gpuprof.render.runview import html_section

MAX_WARNINGS = 200

CSS = """
:root { --fg:#1d1d1f; --muted:#5f6368; --line:#dadce0; --bg:#ffffff; --card:#f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; padding: 24px; max-width: 1200px; }
p, li, summary, figcaption, .inputs { overflow-wrap: anywhere; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 4px; }
.muted { color: var(--muted); } .small { font-size: 12px; margin: 4px 0 0; } .inputs { font-size: 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 140px; flex: 1 1 140px; }
.card .v { font-size: 20px; font-weight: 600; overflow-wrap: anywhere; } .card .k { color: var(--muted); font-size: 12px; }
ol.recs > li { margin: 0 0 12px; } .badge { display: inline-block; border-radius: 10px; padding: 0 8px;
       font-size: 12px; margin-left: 6px; } .save { font-weight: 600; }
details > summary { cursor: pointer; color: var(--muted); }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 6px 0; }
caption { text-align: left; color: var(--muted); font-size: 12px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 10px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
.scroll { overflow-x: auto; max-width: 100%; }
.legend { margin: 4px 0 6px; } .legend span { display: inline-block; margin-right: 14px; font-size: 12px; white-space: nowrap; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; border-radius: 2px; vertical-align: -1px; }
.legend i.crit { width: 16px; height: 5px; background: #000; border: 1px solid #fff; outline: 1px solid #5f6368; border-radius: 0; vertical-align: 2px; }
.legend i.tagkey { width: 22px; height: 12px; background: transparent; border: 1px solid var(--fg); border-radius: 6px; }
.legend i.dotkey { border-radius: 50%; background: #0072B2; opacity: .7; }
.legend i.ringkey { border-radius: 50%; background: transparent; border: 2px solid #D55E00; }
.legend i.linekey { height: 2px; width: 14px; background: #5f6368; vertical-align: 3px; border-radius: 0; }
.legend i.rangekey { width: 3px; height: 12px; background: #0072B2; border-radius: 0; }
.caveat { background: #fff8e1; border-left: 4px solid #E69F00; padding: 6px 10px; margin: 8px 0; }
.empty { font-size: 16px; padding: 16px; background: #fff8e1; border: 1px solid #ffe082; border-radius: 8px; }
figure.fig { margin: 8px 0 18px; } figcaption { font-size: 13px; font-weight: 600; margin-bottom: 4px; }
.rows { display: grid; grid-template-columns: max-content minmax(0, 1fr) max-content; column-gap: 8px; row-gap: 1px; align-items: center; }
.rows > .l { font-size: 12px; text-align: right; white-space: nowrap; }
.rows > .v { font-size: 12px; color: var(--muted); white-space: nowrap; font-variant-numeric: tabular-nums; }
.plot2 { display: grid; grid-template-columns: 64px minmax(0, 1fr); align-items: start; }
svg { display: block; overflow: visible; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
svg .tick { stroke: var(--muted); } svg .grid { stroke: #e8eaed; }
svg .dot { fill: #0072B2; fill-opacity: .7; } svg .ring { fill: none; stroke: #D55E00; stroke-width: 2; }
svg .jobline { stroke: #5f6368; stroke-width: 1.5; } svg .range { stroke: #0072B2; stroke-width: 3; }
.tag { font-size: 10px; font-weight: 600; border: 1px solid var(--fg); border-radius: 6px; padding: 0 4px; margin-left: 4px; }
.two { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 420px), 1fr)); column-gap: 32px; }
.shares { font-size: 13px; margin: 6px 0 0; }
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'none'; base-uri 'none'; form-action 'none'"


def e(value: object) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def _safe_json(data: object) -> str:
    """JSON for a ``<script type="application/json">`` block that no string can break out of."""
    text = json.dumps(data, allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _cards(report: Report) -> str:
    s = fg.job_shares(report)
    top = max(CAUSES, key=lambda c: s.lost_us[c])
    step = fg.job_step_time_us(report)
    if step is None and fg.no_steps(report):
        step = max(r.window_us for r in report.ranks if fg.has_data(r))
    cards = [
        ("compute share", fg.fmt_pct(s.compute_pct)),
        (fg.step_card_label(report), fg.fmt_duration(step) if step is not None else fg.NA),
        ("ranks", str(len(report.ranks))),
        (f"lost to {top.value}, the largest cause", fg.fmt_pct(s.lost_pct[top]))
        if s.lost_us[top] > 0
        else ("lost time", "none"),
    ]
    body = "".join(f'<div class="card"><div class="v">{e(v)}</div><div class="k">{e(k)}</div></div>' for k, v in cards)
    return f'<div class="cards">{body}</div>'


def _where_time_went(report: Report) -> str:
    """The whole job in one bar, and every part with a share in words, largest first."""
    s = fg.job_shares(report)
    pct = {"compute": s.compute_pct, **{c.value: s.lost_pct[c] for c in CAUSES}}
    us = {"compute": s.compute_us, **{c.value: s.lost_us[c] for c in CAUSES}}
    parts = sorted(((k, v) for k, v in pct.items() if v and v >= 0.05), key=lambda kv: -(kv[1] or 0.0))
    words = " · ".join(
        f'<span><i style="background:{CAUSE_COLORS[k]}"></i>{e(k)} <b>{e(fg.fmt_pct(v))}</b></span>' for k, v in parts
    )
    return (
        "<h2>Where the time went</h2>"
        + ch.job_bar(pct, us)
        + f'<div class="legend shares">{words}</div>'
    )


def _recommendations(report: Report, view: fg.View = fg.FULL) -> str:
    if not report.recommendations:
        return f"<h2>What to change</h2><p class=\"muted\">{html.escape(fg.no_recommendation(report))}</p>"
    items = []
    for i, rec in enumerate(view.shown(report)):
        color = CAUSE_COLORS[rec.category.value]
        ranks = fg.ranks_phrase(rec.ranks)
        ev = "".join(f"<li>{e(x)}</li>" for x in rec.evidence)
        act = "".join(f"<li>{e(x)}</li>" for x in rec.actions)
        details = ""
        if ev or act:
            details = (
                f"<details{' open' if i == 0 else ''}><summary>Evidence and what to try</summary>"
                + (f"<p>Evidence</p><ul>{ev}</ul>" if ev else "")
                + (f"<p>Try</p><ul>{act}</ul>" if act else "")
                + "</details>"
            )
        items.append(
            f"<li><strong>{e(rec.title)}</strong>"
            f'<span class="badge" style="background:{color};color:{text_color_on(color)}">{e(rec.category.value)}</span> '
            f'<span class="save">{e(fg.saving_phrase(rec, report))}</span> '
            f'<span class="muted">{e(ranks)}</span>{details}</li>'
        )
    combined = view.combined(report)
    after = f'<p class="muted">... and {view.hidden(report)} more (without --top)</p>' if view.hidden(report) else ""
    after += f"<p><strong>{e(combined)}</strong></p>" if combined is not None else ""
    return "<h2>What to change</h2><ol class=\"recs\">" + "".join(items) + "</ol>" + after


def _critical_by_step_index(report: Report) -> dict[int, int]:
    """The critical rank of each profiled step, by position (0 = first step)."""
    job = report.extra.get("job")
    rows = job.get("critical_rank_per_step") if isinstance(job, Mapping) else None
    if not isinstance(rows, list):
        return {}
    valid = [r for r in rows if isinstance(r, Mapping) and isinstance(r.get("rank"), int) and isinstance(r.get("step"), int)]
    valid.sort(key=lambda r: r["step"])
    return {i: int(r["rank"]) for i, r in enumerate(valid)}


def _timeline_section(report: Report) -> str:
    chart = ch.timeline_chart(report.extra.get("timeline"), slowest_rank=fg.slowest_rank(report))
    if not chart:
        return ""
    return "<h2>One step, every rank</h2>" + chart


def _step_times_section(report: Report) -> str:
    ranks = [r for r in report.ranks if fg.has_data(r) and r.step_times_us]
    if not ranks or max(len(r.step_times_us) for r in ranks) < 2:
        return ""  # one step: the timeline above is the whole story
    chart = ch.step_times_chart(ranks, _critical_by_step_index(report))
    return "<h2>Step time, step by step</h2>" + chart if chart else ""


def _rank_bars_section(report: Report) -> str:
    shown, note = fg.ranks_to_show(report, limit=ch.MAX_DOT_RANKS)
    shown = [r for r in shown if fg.has_data(r)]
    if not shown:
        return ""
    # Kinds with a visible segment somewhere (at least 0.05 % of a window).
    kinds = [
        k for k in ch.KINDS
        if any((r.compute_us if k == "compute" else float(r.lost_us.get(Cause(k), 0.0))) >= 5e-4 * r.window_us for r in shown)
    ]  # fmt: skip
    out = "<h2>Where each rank's time went</h2>" + ch.legend(kinds)
    out += '<div class="two">' + ch.rank_bars(shown, absolute=True) + ch.rank_bars(shown, absolute=False) + "</div>"
    if note:
        out += f'<p class="muted small">{e(note)}</p>'
    return out


def rank_bars_svg(report: Report) -> str:
    """The per-rank bars (milliseconds per step and shares), as in the page."""
    return _rank_bars_section(report)


def _totals_table(report: Report) -> str:
    s = fg.job_shares(report)
    rows = [("window", s.window_us, 100.0 if s.window_us > 0 else None), ("compute", s.compute_us, s.compute_pct)]
    rows += [(f"lost: {c.value}", s.lost_us[c], s.lost_pct[c]) for c in CAUSES]
    body = "".join(f"<tr><td>{e(k)}</td><td>{e(fg.fmt_ms(us))}</td><td>{e(fg.fmt_pct(p))}</td></tr>" for k, us, p in rows)
    return f"<table><thead><tr><th></th><th>ms</th><th>% of window</th></tr></thead><tbody>{body}</tbody></table>"


def _rank_table(report: Report) -> str:
    """One row per rank; the causes that lost time come first, largest first (so the biggest
    ones are in view without scrolling the table), causes that lost nothing are named below."""
    s = fg.job_shares(report)
    causes = sorted((c for c in CAUSES if s.lost_us[c] > 0), key=lambda c: -s.lost_us[c])
    idle = [c.value for c in CAUSES if s.lost_us[c] <= 0]
    devices = {r.device for r in report.ranks}
    one_device = len(devices) == 1
    stages = any(isinstance(r.extra.get("stage"), int) for r in report.ranks)
    cols = ["rank"] + ([] if one_device else ["device"]) + (["stage"] if stages else [])
    cols += ["steps", f"{fg.STEP_STAT} ms", "compute"] + [c.value for c in causes] + ["window ms"]
    head = "".join(f"<th>{e(h)}</th>" for h in cols)
    rows = []
    for r in report.ranks:
        cells = [str(r.rank)] + ([] if one_device else [r.device if r.device is not None else fg.NA])
        if stages:
            st = r.extra.get("stage")
            cells.append(str(st) if isinstance(st, int) else fg.NA)
        cells.append(str(r.steps))
        if fg.has_data(r):
            cells += [fg.fmt_ms(fg.step_time_us(r)), fg.fmt_pct(fg.compute_pct(r))]
            cells += [fg.fmt_pct(fg.lost_pct(r, c)) for c in causes] + [fg.fmt_ms(r.window_us)]
        else:
            cells += [fg.NA] * (3 + len(causes))
        rows.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    table = f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    notes = []
    if one_device and report.ranks:
        dev = next(iter(devices))
        notes.append(f"Every rank: {dev if dev is not None else 'device ' + fg.NA}.")
    if idle:
        notes.append("No time lost to " + ", ".join(idle) + ".")
    table += "".join(f'<p class="muted small">{e(n)}</p>' for n in notes)
    if len(report.ranks) > fg.MANY_RANKS:
        return f"<details><summary>All {len(report.ranks)} ranks</summary>{table}</details>"
    return table


def _samples_section(report: Report) -> str:
    """Utilization over time, the per-GPU table and run-level notes; empty without samples."""
    rows = sf.gpu_rows(report)
    notes = sf.sample_notes(report)
    util = ch.utilization_chart(sf.utilization_points(report))
    if not rows and not notes and not util:
        return ""
    parts = ["<h2>GPUs over the run (NVML samples)</h2>"]
    if util:
        parts.append(util)
    if rows:
        head = "".join(f"<th>{h}</th>" for h in ("GPU", "samples", "mean", "p90", "min", "max", "memory peak", "energy J"))
        body = "".join(
            "<tr>"
            + "".join(
                f"<td>{e(c)}</td>"
                for c in (
                    r.gpu, r.samples, fg.fmt_pct(r.mean_pct, 0), fg.fmt_pct(r.p90_pct, 0), fg.fmt_pct(r.min_pct, 0),
                    fg.fmt_pct(r.max_pct, 0), fg.fmt_pct(r.mem_peak_pct, 0),
                    fg.NA if r.energy_j is None else f"{r.energy_j:,.0f}",
                )
            )
            + "</tr>"
            for r in rows
        )  # fmt: skip
        parts.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')
    if notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    return "".join(parts)


def _table_html(t: Table) -> str:
    head = "" if not any(t.columns) else "<thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in t.columns) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    cap = f"<caption>{e(t.caption)}</caption>" if t.caption else ""
    note = f'<p class="muted small">{e(t.note)}</p>' if t.note else ""
    return f'<div class="scroll"><table>{cap}{head}<tbody>{body}</tbody></table></div>{note}'


def _job_findings(report: Report) -> str:
    """Cross-rank findings: what each means in a sentence, its numbers in tables."""
    ctx = findings_context(report)
    blocks = job_blocks(report.extra.get("job"), ctx)
    if not blocks:
        return ""
    out = [f"<h2>{e(section_title(ctx))}</h2>"]
    for b in blocks:
        out.append(f"<h3>{e(b.title)}</h3>")
        out.extend(f"<p>{e(x)}</p>" for x in b.sentences)
        tables = "".join(_table_html(t) for t in b.tables)
        if tables and b.sentences:
            out.append(f"<details><summary>Numbers</summary>{tables}</details>")
        else:
            out.append(tables)
    return "".join(out)


ANNOTATED_SUFFIXES = (".annotated.json.gz", ".annotated.json")


def annotated_link(href: str) -> str:
    """A pointer to the annotated trace (``gpuprof annotate``) written beside the page."""
    return (
        f'<p class="small">The same traces with a track per cause of lost time: <a href="{e(href)}">{e(href)}</a> '
        "(open it in ui.perfetto.dev or chrome://tracing to see each lost interval beside the kernels around it).</p>"
    )


def render_html(report: Report, width: int = 100, annotated: str | None = None, view: fg.View = fg.FULL) -> str:
    """The whole page as one string (``width`` is unused: the page reflows). ``annotated``:
    the relative name of an annotated trace beside the page, linked under the timeline."""
    body: list[str] = ["<h1>gpuprof report</h1>"]
    if len(report.inputs) > 3:
        body.append(
            f'<details class="muted inputs"><summary>{e(", ".join(report.inputs[:3]))} and {len(report.inputs) - 3} more inputs'
            f"</summary>{e(', '.join(report.inputs[3:]))}</details>"
        )
    elif report.inputs:
        body.append('<div class="muted inputs">' + e(", ".join(report.inputs)) + "</div>")
    empty = fg.nothing_to_analyze(report)
    cpu = fg.cpu_only_summary(report)
    if cpu is not None:
        body.append(f'<p class="empty">{e(cpu.headline)}</p><ul>' + "".join(f"<li>{e(x)}</li>" for x in cpu.lines) + "</ul>")
    elif empty is not None:
        body.append(f'<p class="empty">{e(empty)}</p>')
    if empty is not None:
        body.append(_samples_section(report))
        body.append(html_section(report))
    else:
        body.append(_cards(report))
        body.extend(f'<p class="caveat">{e(c)}</p>' for c in fg.report_caveats(report))
        body.append(_where_time_went(report))
        body.append(_recommendations(report, view))
        body.append(_timeline_section(report))
        if annotated:
            body.append(annotated_link(annotated))
        body.append(_step_times_section(report))
        body.append(_rank_bars_section(report))
        body.append("<h2>Totals</h2>" + f'<div class="scroll">{_totals_table(report)}</div>')
        body.append("<h2>Per rank</h2>" + _rank_table(report))
        body.append(_job_findings(report))
        body.append(_samples_section(report))
        body.append(html_section(report))
    warnings = fg.shown_warnings(report)
    if warnings:
        items = "".join(f"<li>{e(w)}</li>" for w in warnings[:MAX_WARNINGS])
        more = len(warnings) - MAX_WARNINGS
        if more > 0:
            items += f"<li>... and {more} more (see the JSON report)</li>"
        body.append(f"<h2>Warnings</h2><ul>{items}</ul>")
    return page("gpuprof report", body, report_to_dict(report), "gpuprof-report")


def page(title: str, body: Sequence[str], data: object, data_id: str) -> str:
    """A whole page: the CSP, the styles, ``body`` (already escaped markup) and ``data``
    embedded as inert JSON under ``id=data_id``."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title>"
        f"<style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + f'\n<script type="application/json" id="{e(data_id)}">{_safe_json(data)}</script>\n'
        + "</body></html>\n"
    )


@register("html")
def _render(report: Report, width: int = 100) -> str:
    return render_html(report, width)
