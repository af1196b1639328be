"""``gpuprof diff`` output: a :class:`~gpuprof.ci.diff.ReportDiff` as text, Markdown, HTML or JSON.

Every form says first whether the run is better or worse overall (the step time, else the
compute share), then what moved, the larger side of the verdict first.
"""

from __future__ import annotations

import io
import json

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuprof.ci.diff import RankDiff, ReportDiff, ShareChange, diff_to_dict
from gpuprof.ci.verdict import Kind
from gpuprof.ci.verdict_text import verdict_lines, verdict_markdown
from gpuprof.render import figures as fg
from gpuprof.render.markdown import md_escape
from gpuprof.render.palette import CAUSE_COLORS
from gpuprof.util import phrases

MAX_RANK_ROWS = 16  # ranks with the largest change are listed; the JSON has them all


def _pct(v: float | None) -> str:
    return fg.fmt_pct(v)


def _pp(v: float | None) -> str:
    return phrases.pp(v)  # "+2.5 pp", "0.0 pp" (never "-0.0 pp")


def _ms(v: float | None) -> str:
    """A step time given in milliseconds, written as every report writes a duration
    (``46.61 s``, never ``46,612.9 ms``)."""
    return phrases.duration(None if v is None else v * 1000.0)


def verdict_text_lines(d: ReportDiff) -> list[str]:
    """The gate's verdict on the step, as ``gpuprof check`` says it (none without one)."""
    if d.verdict is None:
        return []
    lines = verdict_lines(d.verdict)
    return [f"verdict: {lines[0]}", *lines[1:]]


def step_line(d: ReportDiff) -> str:
    if d.step_change_pct is None:
        return f"step time: {_ms(d.base_step_ms)} -> {_ms(d.current_step_ms)} (no step markers to compare)"
    return f"step time: {_ms(d.base_step_ms)} -> {_ms(d.current_step_ms)} ({phrases.signed_pct(d.step_change_pct)}, {d.step_verdict})"


OVERALL = {"better": "better overall", "worse": "worse overall", "same": "about the same overall", "n/a": "no overall verdict"}


def overall_line(d: ReportDiff) -> str:
    """``better overall (step -20.4% [-22.0%, -18.1%])``: the verdict, and the figure it
    rests on (the step verdict's change and interval when it decided, else the mean step's
    change, else the compute share's)."""
    lead = OVERALL.get(d.overall, d.overall)
    v = d.verdict
    if v is not None and v.kind in (Kind.REGRESSION, Kind.IMPROVEMENT, Kind.NO_CHANGE):
        return (
            f"{lead} (step {phrases.signed_pct(v.effect_pct)} [{phrases.signed_pct(v.low_pct)}, "
            f"{phrases.signed_pct(v.high_pct)}], {v.settings.confidence_pct:g}% interval)"
        )
    if d.step_change_pct is not None:
        return f"{lead} (step time {phrases.signed_pct(d.step_change_pct)})"
    compute = d.share("compute").delta_pp
    return f"{lead} (compute {_pp(compute)})" if compute is not None else lead


def headline(d: ReportDiff) -> str:
    """One line: the overall verdict first, then what got better and worse, largest change
    first, the side that agrees with the verdict first."""
    worse = sorted(d.worse, key=lambda s: -abs(s.delta_pp or 0.0))
    better = sorted(d.better, key=lambda s: -abs(s.delta_pp or 0.0))
    groups = [("worse", worse), ("better", better)] if d.overall == "worse" else [("better", better), ("worse", worse)]
    parts = [overall_line(d)]
    parts += [f"{name}: " + ", ".join(f"{s.name} {_pp(s.delta_pp)}" for s in items) for name, items in groups if items]
    if not worse and not better:
        parts.append("no share changed by more than the noise level")
    return "; ".join(parts)


def _rank_change(rd: RankDiff) -> float:
    return max((abs(s.delta_pp) for s in rd.shares if s.delta_pp is not None), default=0.0)


def _ranks_shown(d: ReportDiff) -> list[RankDiff]:
    ranks = sorted(d.ranks, key=lambda rd: (-_rank_change(rd), rd.rank))[:MAX_RANK_ROWS]
    return sorted(ranks, key=lambda rd: rd.rank)


def _largest(rd: RankDiff) -> str:
    moved = [s for s in rd.shares if s.name != "compute" and s.verdict in ("worse", "better")]
    moved.sort(key=lambda s: -abs(s.delta_pp or 0.0))
    return ", ".join(f"{s.name} {_pp(s.delta_pp)}" for s in moved[:3]) or "-"


def diff_text(d: ReportDiff, width: int = 100, color: bool = False, wrap: bool = True) -> str:
    """The diff for a terminal or a log: ANSI colour only if ``color``; with ``wrap=False``
    the headline stays on one line whatever its length."""
    buf = io.StringIO()
    console = Console(
        file=buf, width=max(40, width), force_terminal=color, color_system="standard" if color else None,
        no_color=not color, markup=False, highlight=False, emoji=False,
    )  # fmt: skip
    style = {"better": "bold green", "worse": "bold red"}.get(d.overall, "bold")
    console.print(Text("gpuprof diff: ").append(headline(d), style=style), soft_wrap=not wrap)
    console.print(Text(step_line(d)), soft_wrap=not wrap)
    for line in verdict_text_lines(d):
        console.print(Text(line), soft_wrap=not wrap)
    table = Table(title="Share of window", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, justify in (("", "left"), ("base", "right"), ("current", "right"), ("change", "right"), ("", "left")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for s in d.shares:
        verdict = Text(s.verdict, style={"better": "green", "worse": "red"}.get(s.verdict, ""))
        table.add_row(s.name, _pct(s.base_pct), _pct(s.current_pct), _pp(s.delta_pp), verdict)
    console.print(table)
    if d.ranks:
        rt = Table(title="Per rank", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for name in ("rank", "step base", "step now", "compute", "largest changes"):
            rt.add_column(name, justify="left" if name == "largest changes" else "right")
        for rd in _ranks_shown(d):
            rt.add_row(str(rd.rank), _ms(rd.base_step_ms), _ms(rd.current_step_ms), _pp(rd.share("compute").delta_pp), _largest(rd))
        console.print(rt)
        if len(d.ranks) > MAX_RANK_ROWS:
            console.print(Text(f"showing the {MAX_RANK_ROWS} ranks that changed most of {len(d.ranks)}; all in --format json"))
    if d.only_in_base or d.only_in_current:
        console.print(Text(f"ranks only in base: {list(d.only_in_base)}; only in current: {list(d.only_in_current)}"))
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def _md_row(s: ShareChange) -> str:
    verdict = {"worse": "**worse**", "better": "better"}.get(s.verdict, s.verdict)
    return f"| {md_escape(s.name)} | {_pct(s.base_pct)} | {_pct(s.current_pct)} | {_pp(s.delta_pp)} | {verdict} |"


def diff_markdown(d: ReportDiff) -> str:
    lines = [f"### gpuprof diff: {md_escape(headline(d))}", "", md_escape(step_line(d)), ""]
    if d.verdict is not None:
        lines += ["Verdict on the step time: " + verdict_markdown(d.verdict)]
    lines += ["| share of window | base | current | change | |", "|---|---:|---:|---:|---|"]
    lines += [_md_row(s) for s in d.shares]
    if d.ranks:
        lines += ["", "<details><summary>Per rank</summary>", ""]
        lines += ["| rank | step base | step now | compute | largest changes |", "|---:|---:|---:|---:|---|"]
        for rd in _ranks_shown(d):
            lines.append(
                f"| {rd.rank} | {_ms(rd.base_step_ms)} | {_ms(rd.current_step_ms)} | "
                f"{_pp(rd.share('compute').delta_pp)} | {md_escape(_largest(rd))} |"
            )
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def diff_json(d: ReportDiff, base_inputs: tuple[str, ...] = (), current_inputs: tuple[str, ...] = ()) -> str:
    return json.dumps(diff_to_dict(d, base_inputs, current_inputs), indent=2, allow_nan=False) + "\n"


# --- HTML ------------------------------------------------------------------------------------

_VERDICT_COLORS = {"better": "#009E73", "worse": "#D55E00"}  # Okabe-Ito bluish green, vermillion


def _delta_bar(delta: float | None, scale: float, verdict: str) -> str:
    """A bar from the middle, right for an increase and left for a decrease, coloured by
    the verdict (grey within the noise)."""
    if delta is None or scale <= 0:
        return '<svg width="100%" height="14" aria-hidden="true"></svg>'
    w = 50.0 * min(abs(delta) / scale, 1.0)
    x = 50.0 if delta >= 0 else 50.0 - w
    color = _VERDICT_COLORS.get(verdict, "#C8C8C8")
    return (
        '<svg width="100%" height="14" aria-hidden="true"><line x1="50%" x2="50%" y1="0" y2="14" class="tick"/>'
        f'<rect x="{x:.3f}%" width="{w:.3f}%" y="2" height="10" fill="{color}"/></svg>'
    )


def diff_html(d: ReportDiff, base_inputs: tuple[str, ...] = (), current_inputs: tuple[str, ...] = ()) -> str:
    """The diff as one offline page (the same CSP and escaping as the HTML report)."""
    from gpuprof.render import charts as ch
    from gpuprof.render.html import e, page

    color = _VERDICT_COLORS.get(d.overall, "#5f6368")
    body = ["<h1>gpuprof diff</h1>"]
    body.append(f'<div class="muted inputs">base: {e(", ".join(base_inputs) or "?")}<br>current: {e(", ".join(current_inputs) or "?")}</div>')
    body.append(
        f'<p class="verdict" style="border-left:6px solid {color};padding:6px 12px;font-size:17px">'
        f"<b>{e(overall_line(d)[:1].upper() + overall_line(d)[1:])}</b></p>"
    )
    body.append(f"<p>{e(step_line(d))}</p>")
    if d.verdict is not None:
        body.append('<pre class="verdict-lines">' + e("\n".join(verdict_text_lines(d))) + "</pre>")
    moved = headline(d).split("; ")[1:]
    if moved:
        body.append("<ul>" + "".join(f"<li>{e(m)}</li>" for m in moved) + "</ul>")
    # The job before and after, as the report's one-bar view.
    base_pct = {s.name: s.base_pct for s in d.shares}
    cur_pct = {s.name: s.current_pct for s in d.shares}
    body.append("<h2>Where the time went</h2>")
    body.append(
        '<div class="rows">'
        f'<span class="l">base</span>{ch.job_bar(base_pct, {})}<span class="v"></span>'
        f'<span class="l">current</span>{ch.job_bar(cur_pct, {})}<span class="v"></span></div>'
    )
    body.append(ch.legend([k for k in ch.KINDS if (base_pct.get(k) or 0) > 0 or (cur_pct.get(k) or 0) > 0]))
    scale = max((abs(s.delta_pp) for s in d.shares if s.delta_pp is not None), default=0.0)
    rows = []
    for s in d.shares:
        swatch = f'<i style="display:inline-block;width:10px;height:10px;margin-right:4px;background:{CAUSE_COLORS[s.name]}"></i>'
        verdict = f'<b style="color:{_VERDICT_COLORS[s.verdict]}">{e(s.verdict)}</b>' if s.verdict in _VERDICT_COLORS else e(s.verdict)
        rows.append(
            f"<tr><td>{swatch}{e(s.name)}</td><td>{e(_pct(s.base_pct))}</td><td>{e(_pct(s.current_pct))}</td>"
            f"<td>{e(_pp(s.delta_pp))}</td><td style=\"width:30%;min-width:80px\">{_delta_bar(s.delta_pp, scale, s.verdict)}</td>"
            f"<td>{verdict}</td></tr>"
        )
    body.append("<h2>Share of the window</h2>")
    body.append(
        '<div class="scroll"><table style="width:100%"><thead><tr><th></th><th>base</th><th>current</th><th>change</th>'
        f'<th></th><th></th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )
    if d.ranks:
        rrows = "".join(
            f"<tr><td>{rd.rank}</td><td>{e(_ms(rd.base_step_ms))}</td><td>{e(_ms(rd.current_step_ms))}</td>"
            f"<td>{e(_pp(rd.share('compute').delta_pp))}</td><td>{e(_largest(rd))}</td></tr>"
            for rd in _ranks_shown(d)
        )
        body.append("<h2>Per rank</h2>")
        body.append(
            '<div class="scroll"><table><thead><tr><th>rank</th><th>step base</th><th>step now</th><th>compute</th>'
            f"<th>largest changes</th></tr></thead><tbody>{rrows}</tbody></table></div>"
        )
        if len(d.ranks) > MAX_RANK_ROWS:
            body.append(f'<p class="muted small">showing the {MAX_RANK_ROWS} ranks that changed most of {len(d.ranks)}; all in --format json</p>')
    if d.only_in_base or d.only_in_current:
        body.append(f'<p class="muted">ranks only in base: {e(list(d.only_in_base))}; only in current: {e(list(d.only_in_current))}</p>')
    return page("gpuprof diff", body, diff_to_dict(d, base_inputs, current_inputs), "gpuprof-diff")
