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
from collections.abc import Iterable, Mapping, Sequence

from gpuprof.model.report import CAUSES, Report, report_to_dict
from gpuprof.render import figures as fg
from gpuprof.render import register

MAX_WARNINGS = 200

CSS = """
:root { --fg:#1d1d1f; --muted:#5f6368; --line:#dadce0; --bg:#ffffff; --card:#f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; padding: 24px; max-width: 1200px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.muted { color: var(--muted); } .inputs { font-size: 12px; word-break: break-all; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 150px; }
.card .v { font-size: 20px; font-weight: 600; } .card .k { color: var(--muted); font-size: 12px; }
ol.recs > li { margin: 0 0 12px; } .badge { display: inline-block; border-radius: 10px; padding: 0 8px;
       font-size: 12px; color: #fff; margin-left: 6px; } .save { font-weight: 600; }
details > summary { cursor: pointer; color: var(--muted); }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 6px 0; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 10px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
.scroll { overflow-x: auto; } .legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; border-radius: 2px; }
pre { background: var(--card); padding: 10px; overflow-x: auto; font-size: 12px; }
.empty { font-size: 16px; padding: 16px; background: #fff8e1; border: 1px solid #ffe082; border-radius: 8px; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
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
    top_txt = f"{top.value} {fg.fmt_pct(s.lost_pct[top])}" if s.lost_us[top] > 0 else "none"
    step = fg.job_step_time_us(report)
    cards = [
        ("compute share", fg.fmt_pct(s.compute_pct)),
        ("step time", f"{fg.fmt_ms(step)} ms" if step is not None else fg.NA),
        ("ranks", str(len(report.ranks))),
        ("largest lost cause", top_txt),
    ]
    body = "".join(f'<div class="card"><div class="v">{e(v)}</div><div class="k">{e(k)}</div></div>' for k, v in cards)
    return f'<div class="cards">{body}</div>'


def _recommendations(report: Report) -> str:
    if not report.recommendations:
        return "<h2>What to change</h2><p class=\"muted\">No recommendation: no cause of lost time stands out.</p>"
    items = []
    for i, rec in enumerate(report.recommendations):
        color = fg.CAUSE_COLORS[rec.category.value]
        ranks = fg.rank_list(rec.ranks)
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
            f'<span class="badge" style="background:{color}">{e(rec.category.value)}</span> '
            f'<span class="save">saves ~{rec.estimated_savings_pct:.1f}% of step time</span> '
            f'<span class="muted">ranks {e(ranks)} &middot; {e(rec.id)}</span>{details}</li>'
        )
    return "<h2>What to change</h2><ol class=\"recs\">" + "".join(items) + "</ol>"


def _legend() -> str:
    keys = ["compute"] + [c.value for c in CAUSES]
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{fg.CAUSE_COLORS[k]}"></i>{e(k)}</span>' for k in keys
    ) + "</div>"


def rank_bars_svg(report: Report, width_px: int = 1100) -> str:
    """A horizontal stacked bar per rank: compute then each cause, as shares of its window."""
    ranks = [r for r in report.ranks if fg.has_data(r)]
    if not ranks:
        return ""
    bar_h = max(3, min(18, 720 // len(ranks)))
    gap = 2 if bar_h >= 6 else 0
    label_w, right = 70, 10
    plot_w = width_px - label_w - right
    label_every = max(1, -(-12 // bar_h))  # keep labels at least ~12 px apart
    top = 8  # room for the first label's ascenders
    height = top + len(ranks) * (bar_h + gap) + 24
    parts = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="time per rank" shape-rendering="crispEdges" '
        f'width="{width_px}" height="{height}" viewBox="0 0 {width_px} {height}">')
    ]
    for i, r in enumerate(ranks):
        y = top + i * (bar_h + gap)
        if i % label_every == 0:
            parts.append(f'<text x="{label_w - 6}" y="{y + bar_h - 2}" text-anchor="end">rank {r.rank}</text>')
        x = float(label_w)
        segments = [("compute", r.compute_us)] + [(c.value, float(r.lost_us.get(c, 0.0))) for c in CAUSES]
        for key, us in segments:
            if us <= 0:
                continue
            w = plot_w * us / r.window_us
            tip = f"rank {r.rank} · {key}: {fg.fmt_ms(us)} ms ({fg.fmt_pct(fg.pct(us, r.window_us))})"
            parts.append(
                f'<rect x="{x:.2f}" y="{y}" width="{max(w, 0.0):.2f}" height="{bar_h}" '
                f'fill="{fg.CAUSE_COLORS[key]}"><title>{e(tip)}</title></rect>'
            )
            x += w
    axis_y = top + len(ranks) * (bar_h + gap) + 14
    for p in (0, 25, 50, 75, 100):
        px = label_w + plot_w * p / 100
        parts.append(f'<text x="{px:.1f}" y="{axis_y}" text-anchor="middle">{p}%</text>')
    parts.append("</svg>")
    return "".join(parts)


def _segments(points: Sequence[fg.UtilPoint]) -> Iterable[list[fg.UtilPoint]]:
    """Runs of consecutive points with a value; a missing value (N/A) breaks the line."""
    run: list[fg.UtilPoint] = []
    for p in points:
        if p.util_pct is None:
            if run:
                yield run
            run = []
        else:
            run.append(p)
    if run:
        yield run


def utilization_svg(points: Sequence[fg.UtilPoint], width_px: int = 1100, height_px: int = 220) -> str:
    """GPU utilization over time, one line per GPU; gaps where a sample had no value."""
    if not points:
        return ""
    t0 = min(p.t_s for p in points)
    t1 = max(p.t_s for p in points)
    span = (t1 - t0) or 1.0
    left, bottom, top = 40, 22, 8
    pw, ph = width_px - left - 10, height_px - bottom - top
    palette = list(fg.CAUSE_COLORS.values())
    by_gpu: dict[str, list[fg.UtilPoint]] = {}
    for p in points:
        by_gpu.setdefault(p.gpu, []).append(p)
    parts = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="GPU utilization over time" '
        f'width="{width_px}" height="{height_px}" viewBox="0 0 {width_px} {height_px}">')
    ]
    for v in (0, 50, 100):
        y = top + ph * (1 - v / 100)
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#dadce0"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{v}%</text>')
    parts.append(f'<text x="{left}" y="{height_px - 4}">{t0:.1f} s</text>')
    parts.append(f'<text x="{left + pw}" y="{height_px - 4}" text-anchor="end">{t1:.1f} s</text>')
    legend = []
    for gi, (gpu, pts) in enumerate(sorted(by_gpu.items())):
        color = palette[gi % len(palette)]
        pts = sorted(pts, key=lambda p: p.t_s)
        for run in _segments(pts):
            xy = " ".join(
                f"{left + pw * (p.t_s - t0) / span:.1f},{top + ph * (1 - min(max(p.util_pct or 0.0, 0.0), 100.0) / 100):.1f}"
                for p in run
            )
            if len(run) == 1:  # a lone sample between gaps: a dot, since a line needs two
                cx, cy = xy.split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{color}"><title>GPU {e(gpu)}</title></circle>')
                continue
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{xy}">'
                f"<title>GPU {e(gpu)}</title></polyline>"
            )
        legend.append(f'<span><i style="background:{color}"></i>GPU {e(gpu)}</span>')
    parts.append("</svg>")
    missing = sum(1 for p in points if p.util_pct is None)
    note = f'<p class="muted">{missing} sample(s) had no utilization value (N/A); the line has gaps there.</p>' if missing else ""
    return "".join(parts) + '<div class="legend">' + "".join(legend) + "</div>" + note


def _totals_table(report: Report) -> str:
    s = fg.job_shares(report)
    rows = [("window", s.window_us, 100.0 if s.window_us > 0 else None), ("compute", s.compute_us, s.compute_pct)]
    rows += [(f"lost: {c.value}", s.lost_us[c], s.lost_pct[c]) for c in CAUSES]
    body = "".join(f"<tr><td>{e(k)}</td><td>{e(fg.fmt_ms(us))}</td><td>{e(fg.fmt_pct(p))}</td></tr>" for k, us, p in rows)
    return f"<table><thead><tr><th></th><th>ms</th><th>% of window</th></tr></thead><tbody>{body}</tbody></table>"


def _rank_table(report: Report) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in ["rank", "device", "steps", "step ms", "window ms", "compute"])
    head += "".join(f"<th>{e(c.value)}</th>" for c in CAUSES)
    rows = []
    for r in report.ranks:
        cells = [str(r.rank), r.device if r.device is not None else fg.NA, str(r.steps)]
        if fg.has_data(r):
            cells += [fg.fmt_ms(fg.step_time_us(r)), fg.fmt_ms(r.window_us), fg.fmt_pct(fg.compute_pct(r))]
            cells += [fg.fmt_pct(fg.lost_pct(r, c)) for c in CAUSES]
        else:
            cells += [fg.NA] * (3 + len(CAUSES))
        rows.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    table = f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    if len(report.ranks) > fg.MANY_RANKS:
        return f"<details><summary>All {len(report.ranks)} ranks</summary>{table}</details>"
    return table


def _samples_section(report: Report) -> str:
    """Utilization over time, the per-GPU table and run-level notes; empty without samples."""
    rows = fg.gpu_rows(report)
    notes = fg.sample_notes(report)
    util = utilization_svg(fg.utilization_points(report))
    if not rows and not notes and not util:
        return ""
    parts = ["<h2>GPUs over the run (NVML samples)</h2>"]
    if util:
        parts.append(f'<div class="scroll">{util}</div>')
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
        parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    if notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    return "".join(parts)


def _job_findings(extra: Mapping[str, object]) -> str:
    job = extra.get("job")
    if not job:
        return ""
    text = json.dumps(job, indent=2, sort_keys=True, default=str)
    return f"<h2>Job findings</h2><details><summary>Cross-rank findings</summary><pre>{e(text)}</pre></details>"


def render_html(report: Report, width: int = 100) -> str:
    """The whole page as one string (``width`` is unused: the page reflows)."""
    body: list[str] = ["<h1>gpuprof report</h1>"]
    if len(report.inputs) > 3:
        body.append(
            f'<details class="muted inputs"><summary>{e(", ".join(report.inputs[:3]))} and {len(report.inputs) - 3} more inputs'
            f"</summary>{e(', '.join(report.inputs[3:]))}</details>"
        )
    elif report.inputs:
        body.append('<div class="muted inputs">' + e(", ".join(report.inputs)) + "</div>")
    empty = fg.nothing_to_analyze(report)
    if empty is not None:
        body.append(f'<p class="empty">{e(empty)}</p>')
        body.append(_samples_section(report))
    else:
        body.append(_cards(report))
        body.append(_recommendations(report))
        body.append("<h2>Where each rank's time went</h2>")
        body.append(_legend())
        body.append(f'<div class="scroll">{rank_bars_svg(report)}</div>')
        body.append("<h2>Totals</h2>" + _totals_table(report))
        body.append("<h2>Per rank</h2>" + _rank_table(report))
        body.append(_samples_section(report))
        body.append(_job_findings(report.extra))
    if report.warnings:
        items = "".join(f"<li>{e(w)}</li>" for w in report.warnings[:MAX_WARNINGS])
        more = len(report.warnings) - MAX_WARNINGS
        if more > 0:
            items += f"<li>... and {more} more (see the JSON report)</li>"
        body.append(f"<h2>Warnings</h2><ul>{items}</ul>")
    data = _safe_json(report_to_dict(report))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>gpuprof report</title>"
        f"<style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + f'\n<script type="application/json" id="gpuprof-report">{data}</script>\n'
        + "</body></html>\n"
    )


@register("html", (".html", ".htm"))
def _render(report: Report, width: int = 100) -> str:
    return render_html(report, width)
