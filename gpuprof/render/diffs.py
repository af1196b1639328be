"""``gpuprof diff`` output: a :class:`~gpuprof.diff.ReportDiff` as text, Markdown or JSON."""

from __future__ import annotations

import io
import json

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuprof.diff import RankDiff, ReportDiff, ShareChange, diff_to_dict
from gpuprof.render import figures as fg
from gpuprof.render.markdown import md_escape

MAX_RANK_ROWS = 16  # ranks with the largest change are listed; the JSON has them all


def _pct(v: float | None) -> str:
    return fg.fmt_pct(v)


def _pp(v: float | None) -> str:
    return fg.NA if v is None else f"{v:+.1f} pp"


def _ms(v: float | None) -> str:
    return fg.NA if v is None else f"{v:,.1f} ms"


def step_line(d: ReportDiff) -> str:
    if d.step_change_pct is None:
        return f"step time: {_ms(d.base_step_ms)} -> {_ms(d.current_step_ms)} (no step markers to compare)"
    return f"step time: {_ms(d.base_step_ms)} -> {_ms(d.current_step_ms)} ({d.step_change_pct:+.1f}%, {d.step_verdict})"


def headline(d: ReportDiff) -> str:
    """One line: what got worse and better, largest change first."""
    worse = sorted(d.worse, key=lambda s: -abs(s.delta_pp or 0.0))
    better = sorted(d.better, key=lambda s: -abs(s.delta_pp or 0.0))
    parts = []
    if worse:
        parts.append("worse: " + ", ".join(f"{s.name} {_pp(s.delta_pp)}" for s in worse))
    if better:
        parts.append("better: " + ", ".join(f"{s.name} {_pp(s.delta_pp)}" for s in better))
    return "; ".join(parts) if parts else "no share changed by more than the noise level"


def _rank_change(rd: RankDiff) -> float:
    return max((abs(s.delta_pp) for s in rd.shares if s.delta_pp is not None), default=0.0)


def _ranks_shown(d: ReportDiff) -> list[RankDiff]:
    ranks = sorted(d.ranks, key=lambda rd: (-_rank_change(rd), rd.rank))[:MAX_RANK_ROWS]
    return sorted(ranks, key=lambda rd: rd.rank)


def _largest(rd: RankDiff) -> str:
    moved = [s for s in rd.shares if s.name != "compute" and s.verdict in ("worse", "better")]
    moved.sort(key=lambda s: -abs(s.delta_pp or 0.0))
    return ", ".join(f"{s.name} {_pp(s.delta_pp)}" for s in moved[:3]) or "-"


def diff_text(d: ReportDiff, width: int = 100) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=max(40, width), force_terminal=False, no_color=True, markup=False, highlight=False)
    console.print(Text("gpuprof diff: " + headline(d)))
    console.print(Text(step_line(d)))
    table = Table(title="Share of window", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, justify in (("", "left"), ("base", "right"), ("current", "right"), ("change", "right"), ("", "left")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for s in d.shares:
        table.add_row(s.name, _pct(s.base_pct), _pct(s.current_pct), _pp(s.delta_pp), s.verdict)
    console.print(table)
    if d.ranks:
        rt = Table(title="Per rank", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for name in ("rank", "step ms base", "step ms now", "compute", "largest changes"):
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
    lines += ["| share of window | base | current | change | |", "|---|---:|---:|---:|---|"]
    lines += [_md_row(s) for s in d.shares]
    if d.ranks:
        lines += ["", "<details><summary>Per rank</summary>", ""]
        lines += ["| rank | step ms base | step ms now | compute | largest changes |", "|---:|---:|---:|---:|---|"]
        for rd in _ranks_shown(d):
            lines.append(
                f"| {rd.rank} | {_ms(rd.base_step_ms)} | {_ms(rd.current_step_ms)} | "
                f"{_pp(rd.share('compute').delta_pp)} | {md_escape(_largest(rd))} |"
            )
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def diff_json(d: ReportDiff, base_inputs: tuple[str, ...] = (), current_inputs: tuple[str, ...] = ()) -> str:
    return json.dumps(diff_to_dict(d, base_inputs, current_inputs), indent=2, allow_nan=False) + "\n"
