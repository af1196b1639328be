"""The whole run in every format: the step time over the run, its changes, its phases, the
profiling windows and a consistently slowest rank (:mod:`gpuprof.render.run_figures` holds
the figures; this module only lays them out).

The HTML chart plots the job's step time at every step (or, past 2,000 steps, bins of
consecutive steps drawn as their median with the range from the fastest to the slowest
step), the profiled windows as shaded bands, each change as a dashed line, and the phases
as a coloured strip under the plot. Plain SVG, no script: numbers and palette colours in
attributes, every string through :func:`e`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

from rich.console import RenderableType
from rich.text import Text

from gpuprof.model.report import Report
from gpuprof.render import run_figures as rf
from gpuprof.render.figures import fmt_duration

TITLE = "Over the run"
PHASE_COLORS = {"training": "#0072B2", "update": "#0072B2", "eval": "#009E73", "rollout": "#E69F00",
                "checkpoint": "#CC79A7", "idle": "#BBBBBB", "startup": "#DDDDDD", "shutdown": "#DDDDDD"}
WINDOW_COLOR = "#D55E00"


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _lines(view: rf.RunView) -> tuple[list[str], list[str]]:
    """(sentences, phase lines) of the run, in the order every format shows them."""
    return list(view.sentences), list(view.phases)


Bullet = Callable[[str, str, str], RenderableType]


def text_section(report: Report, bullet: Bullet) -> list[RenderableType]:
    """The run for the terminal report (empty for a report without it); ``bullet(marker,
    text, style)`` is the text report's own bullet (wrapped or not, as it is)."""
    view = rf.run_view(report)
    if view is None or view.empty:
        return []
    head, phases = _lines(view)
    out: list[RenderableType] = [Text(TITLE, style="bold underline")]
    out.extend(bullet("-", x, "dim") for x in head)
    if phases:
        out.append(Text("Phases", style="bold"))
        out.extend(bullet("-", x, "dim") for x in phases)
    rows = rf.window_table(view)
    if rows:
        out.append(Text("Profiled windows", style="bold"))
        for w, steps, why, kept, found in rows:
            out.append(bullet(f"#{w}", f"steps {steps} ({why}; traces {kept}): {found or '-'}", "cyan"))
    return out


def md_section(report: Report, esc: Callable[[object], str]) -> list[str]:
    """The run as Markdown lines (``esc``: the renderer's own escaping)."""
    view = rf.run_view(report)
    if view is None or view.empty:
        return []
    head, phases = _lines(view)
    out = [f"#### {TITLE}", ""] + [f"- {esc(x)}" for x in head] + [""]
    if phases:
        out += ["Phases:", ""] + [f"- {esc(x)}" for x in phases] + [""]
    rows = rf.window_table(view)
    if rows:
        out += ["| window | steps | why | traces | what it found |", "|---:|---|---|---|---|"]
        out += [f"| {w} | {s} | {esc(why)} | {k} | {esc(found)} |" for w, s, why, k, found in rows]
        out.append("")
    return out


def _nice_max(v: float) -> float:
    if v <= 0 or not math.isfinite(v):
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    return next(m * mag for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * mag >= v)


def step_chart(view: rf.RunView) -> str:
    """The job's step time over the run (see the module docstring); empty without a series."""
    s = view.series
    if s is None or len(s.step) < 2:
        return ""
    lo_step, hi_step = s.step[0], max(s.last_step[-1], s.step[-1])
    span = max(1, hi_step - lo_step)
    top = _nice_max(max(s.max_us) if s.binned else max(s.median_us))
    h, strip = 160, 10

    def x(step: float) -> float:
        return 1000.0 * (step - lo_step) / span

    def y(us: float) -> float:
        return 100.0 * (1.0 - min(us, top) / top)

    parts = [f'<line x1="0" x2="1000" y1="{y(v):.2f}" y2="{y(v):.2f}" class="grid" vector-effect="non-scaling-stroke"/>'
             for v in (0.0, top / 2, top)]
    for w in view.windows:
        if w.first_step is None or w.last_step is None:
            continue
        a, b = x(w.first_step - 0.5), x(w.last_step + 0.5)
        tip = f"window {w.window}, steps {w.first_step}-{w.last_step}: {w.why}" + (f"; {w.top}" if w.top else "")
        parts.append(f'<rect x="{a:.2f}" y="0" width="{max(b - a, 1.5):.2f}" height="100" fill="{WINDOW_COLOR}" '
                     f'fill-opacity="0.18"><title>{e(tip)}</title></rect>')
    if s.binned:
        band = [f"{x(a):.2f},{y(v):.2f}" for a, v in zip(s.step, s.max_us)]
        band += [f"{x(a):.2f},{y(v):.2f}" for a, v in reversed(list(zip(s.step, s.min_us)))]
        parts.append(f'<polygon points="{" ".join(band)}" fill="#0072B2" fill-opacity="0.2"/>')
    line = " ".join(f"{x(a):.2f},{y(v):.2f}" for a, v in zip(s.step, s.median_us))
    parts.append(f'<polyline fill="none" stroke="#0072B2" stroke-width="1.5" vector-effect="non-scaling-stroke" '
                 f'points="{line}"><title>job step time</title></polyline>')
    for c in view.change_steps:
        cx = x(c)
        parts.append(f'<line x1="{cx:.2f}" x2="{cx:.2f}" y1="0" y2="100" stroke="#000" stroke-dasharray="4 3" '
                     f'vector-effect="non-scaling-stroke"><title>{e(f"change at step {c}")}</title></line>')
    ylabels = "".join(f'<text x="100%" y="{(y(v) + 8) * h / 116 + 4:.1f}" text-anchor="end" dx="-4">'
                      f'{e(fmt_duration(v) if v else "0")}</text>' for v in (0.0, top / 2, top))
    strip_svg = _phase_strip(view, lo_step, span, strip)
    xlabels = "".join(
        f'<text x="{100.0 * (t - lo_step) / span:.3f}%" y="13" text-anchor="middle">{t:,}</text>'
        for t in _step_ticks(lo_step, hi_step))
    note = ("each point: the median step of a bin of consecutive steps; the shaded band, its fastest to slowest step"
            if s.binned else "each point: one optimizer step (the job's: the median over its processes)")
    return (
        '<figure class="fig"><div class="legend">'
        '<span><i class="linekey" style="background:#0072B2"></i>step time</span>'
        f'<span><i style="background:{WINDOW_COLOR};opacity:.35"></i>profiled window</span>'
        '<span><i class="linekey" style="background:#000"></i>change (dashed)</span></div>'
        '<div class="plot2">'
        f'<svg class="ylab" width="64" height="{h}" aria-hidden="true">{ylabels}</svg>'
        f'<svg width="100%" height="{h}" viewBox="0 -8 1000 116" preserveAspectRatio="none" role="img" '
        f'aria-label="step time over the run">{"".join(parts)}</svg>'
        f'{strip_svg}<span></span><svg class="axis" width="100%" height="18" aria-hidden="true">{xlabels}</svg>'
        f'</div><p class="muted small">optimizer step; {e(note)}</p></figure>'
    )


def _phase_strip(view: rf.RunView, lo_step: int, span: int, height: int) -> str:
    bands = [b for b in view.bands if b.first_step is not None and b.last_step is not None]
    if not bands:
        return ""
    rects = []
    for b in bands:
        a = min(max(1000.0 * ((b.first_step or 0) - lo_step) / span, 0.0), 1000.0)
        end = min(max(1000.0 * ((b.last_step or 0) + 1 - lo_step) / span, 0.0), 1000.0)
        w = max(1.0, end - a)  # within the plot: the series starts at the first timed step
        color = PHASE_COLORS.get(b.kind, "#888888")
        rects.append(f'<rect x="{a:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{color}">'
                     f'<title>{e(f"{b.kind}: steps {b.first_step}-{b.last_step}")}</title></rect>')
    return (f'<span class="small muted">phases</span><svg width="100%" height="{height}" viewBox="0 0 1000 {height}" '
            f'preserveAspectRatio="none" role="img" aria-label="phases">{"".join(rects)}</svg>')


def _step_ticks(lo: int, hi: int, target: int = 6) -> Sequence[int]:
    span = max(1, hi - lo)
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(int(m * mag) for m in (1, 2, 2.5, 5, 10) if m * mag >= raw and int(m * mag) > 0)
    first = math.ceil(lo / step) * step
    return list(range(int(first), hi + 1, step))


def html_section(report: Report) -> str:
    """The run as an HTML section (empty for a report without it)."""
    view = rf.run_view(report)
    if view is None or view.empty:
        return ""
    head, phases = _lines(view)
    out = [f"<h2>{TITLE}</h2>", step_chart(view)]
    out.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in head) + "</ul>")
    if phases:
        keys = "".join(f'<span><i style="background:{c}"></i>{e(k)}</span>' for k, c in PHASE_COLORS.items()
                       if any(b.kind == k for b in view.bands))
        out.append(f'<h3>Phases</h3><div class="legend">{keys}</div>'
                   + "<ul>" + "".join(f"<li>{e(x)}</li>" for x in phases) + "</ul>")
    rows = rf.window_table(view)
    if rows:
        body = "".join(f"<tr><td>{e(w)}</td><td>{e(s)}</td><td>{e(why)}</td><td>{e(k)}</td><td>{e(f)}</td></tr>"
                       for w, s, why, k, f in rows)
        out.append('<h3>Profiled windows</h3><div class="scroll"><table><thead><tr><th>window</th><th>steps</th>'
                   f"<th>why</th><th>traces</th><th>what it found</th></tr></thead><tbody>{body}</tbody></table></div>")
    return "".join(out)


__all__ = ["html_section", "md_section", "step_chart", "text_section"]
