"""SVG charts for the HTML report: plain functions from figures to markup, no script.

Charts stretch to the width of the page without scaling their text: horizontal positions
are percentages of the plot (``x="12.500%"``), labels sit in HTML grid columns beside
the plots, and only the utilization lines use a stretched ``viewBox`` (with strokes that
do not scale). So one chart reads the same in a 700 px and a 1280 px window, and no chart
ever needs sideways scrolling.

Every string that reaches the markup goes through :func:`e`; attributes only ever hold
numbers and the palette's colours.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprof.model.report import CAUSES, RankReport
from gpuprof.render import figures as fg
from gpuprof.render import sample_figures as sf
from gpuprof.render.palette import CAUSE_COLORS, text_color_on
from gpuprof.util.jsontypes import JsonObject

KINDS: tuple[str, ...] = ("compute",) + tuple(c.value for c in CAUSES)
CRITICAL_COLOR = "#000000"


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _p(x: float) -> str:
    """A percentage coordinate, clamped to the plot."""
    return f"{min(max(x, 0.0), 100.0):.3f}%"


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values covering ``[lo, hi]`` (about ``target`` of them)."""
    span = hi - lo
    if not math.isfinite(span) or span <= 0:
        return [lo]
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    t = first
    while t <= hi + 1e-9 * span:
        out.append(round(t, 10))
        t += step
    return out


def tick_duration(us: float) -> str:
    """A tick label: a duration without a needless ``.0`` (``10 ms``, ``2.5 ms``, ``0``)."""
    if us == 0:
        return "0"
    return fg.fmt_duration(us).replace(".0 ", " ").replace(".00 ", " ")


def legend(kinds: Sequence[str], extra: Sequence[tuple[str, str]] = ()) -> str:
    """Colour keys for ``kinds``, plus ``(css class, label)`` keys for markers."""
    items = [f'<span><i style="background:{CAUSE_COLORS[k]}"></i>{e(k)}</span>' for k in kinds]
    items += [f'<span><i class="{cls}"></i>{e(label)}</span>' for cls, label in extra]
    return '<div class="legend">' + "".join(items) + "</div>"


def _axis_row(ticks: Sequence[float], lo: float, hi: float, fmt: Any, label_cols: int = 1, value_col: bool = True) -> str:
    """An HTML grid row: empty label cells, an SVG of tick labels under the plot column."""
    parts = []
    span = (hi - lo) or 1.0
    for t in ticks:
        x = 100.0 * (t - lo) / span
        anchor = "start" if x < 3 else ("end" if x > 97 else "middle")
        parts.append(f'<line x1="{_p(x)}" x2="{_p(x)}" y1="0" y2="4" class="tick"/>')
        parts.append(f'<text x="{_p(x)}" y="15" text-anchor="{anchor}">{e(fmt(t))}</text>')
    svg = f'<svg class="axis" width="100%" height="18" aria-hidden="true">{"".join(parts)}</svg>'
    return "<span></span>" * label_cols + svg + ("<span></span>" if value_col else "")


# --- the timeline of one step ------------------------------------------------------------


@dataclass(frozen=True)
class Lane:
    rank: int
    stage: int | None
    start_us: float
    end_us: float
    segments: tuple[tuple[str, float, float], ...]
    names: tuple[str | None, ...] = ()  # what each segment is (parallel to segments), when known


def _f(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    x = float(v)
    return x if math.isfinite(x) else None


def read_timeline(data: Any) -> tuple[list[Lane], JsonObject] | None:
    """Lanes and job marks from a report's ``timeline`` key, read defensively (a saved report
    is untrusted input): anything malformed is skipped, never trusted."""
    if not isinstance(data, Mapping) or not isinstance(data.get("lanes"), list):
        return None
    lanes: list[Lane] = []
    for row in data["lanes"]:
        if not isinstance(row, Mapping) or not isinstance(row.get("rank"), int):
            continue
        lo, hi = _f(row.get("start_us")), _f(row.get("end_us"))
        if lo is None or hi is None or hi < lo:
            continue
        raw_names = row.get("segment_names")
        given = raw_names if isinstance(raw_names, list) else []
        segs, names = [], []
        for i, s in enumerate(row.get("segments") or []):
            if isinstance(s, (list, tuple)) and len(s) == 3 and s[0] in CAUSE_COLORS:
                a, b = _f(s[1]), _f(s[2])
                if a is not None and b is not None and b > a:
                    segs.append((str(s[0]), a, b))
                    name = given[i] if i < len(given) else None
                    names.append(name if isinstance(name, str) and name else None)
        stage = row.get("stage") if isinstance(row.get("stage"), int) else None
        lanes.append(Lane(int(row["rank"]), stage, lo, hi, tuple(segs), tuple(names)))
    if not lanes:
        return None
    marks: dict[str, Any] = {
        "step": data.get("step") if isinstance(data.get("step"), int) else None,
        "critical_rank": data.get("critical_rank") if isinstance(data.get("critical_rank"), int) else None,
        "ranks_total": data.get("ranks_total") if isinstance(data.get("ranks_total"), int) else len(lanes),
        "critical_path_source": data.get("critical_path_source") if isinstance(data.get("critical_path_source"), str) else None,
        "critical_path": [],
    }
    for seg in data.get("critical_path") or []:
        if isinstance(seg, Mapping) and isinstance(seg.get("rank"), int):
            a, b = _f(seg.get("start_us")), _f(seg.get("end_us"))
            if a is not None and b is not None and b > a:
                marks["critical_path"].append((int(seg["rank"]), a, b))
    return lanes, marks


# The words the charts mark ranks with, each with its one meaning (shown in the legends):
# the report's rank roles (figures.ROLES), the same words as every other format.
SLOWEST = fg.LONGEST_STEP
SLOWEST_MEANS = fg.ROLES[fg.LONGEST_STEP]
CRITICAL_MEANS = "critical path: the chain of work across ranks that set this step's length"
PACE_MEANS = fg.role_legend(fg.PACE_SETTER)


def segment_title(rank: int, kind: str, a_us: float, b_us: float, name: str | None) -> str:
    """What one timeline segment is, for its hover text: the kind of time, how long, what
    ran there (or what the host was in while the device waited), and when."""
    what = f" · {name}" if name else ""
    return f"{kind} · {fg.fmt_duration(b_us - a_us)}{what} · rank {rank}, from {fg.fmt_duration(a_us)} into the step"


def timeline_chart(data: Any, slowest_rank: int | None = None, step_label: str | None = None) -> str:
    """Swimlanes of one step: a lane per rank (per stage, then rank, for pipelines), each
    kind of time in its colour on the common clock, every segment with a hover text
    (:func:`segment_title`); ``slowest_rank`` (the report's, :func:`figures.slowest_rank`)
    tagged and the critical path drawn as a line above the lanes it runs on. ``step_label``
    names the step shown as the report numbers steps. Empty string when the report has no
    timeline."""
    got = read_timeline(data)
    if got is None:
        return ""
    lanes, marks = got
    pipeline = any(lane.stage is not None for lane in lanes)
    lanes.sort(key=lambda lane: ((lane.stage if lane.stage is not None else -1), lane.rank) if pipeline else (lane.rank, 0))
    lo = min(lane.start_us for lane in lanes)
    hi = max(lane.end_us for lane in lanes)
    span = (hi - lo) or 1.0
    crit_by_rank: dict[int, list[tuple[float, float]]] = {}
    for rank, a, b in marks["critical_path"]:
        crit_by_rank.setdefault(rank, []).append((a, b))
    rows = []
    present: set[str] = set()
    for lane in lanes:
        parts = []
        for i, (kind, a, b) in enumerate(lane.segments):
            present.add(kind)
            x, w = 100.0 * (a - lo) / span, 100.0 * (b - a) / span
            name = lane.names[i] if i < len(lane.names) else None
            tip = segment_title(lane.rank, kind, a - lo, b - lo, name)
            parts.append(
                f'<rect x="{_p(x)}" width="{_p(w)}" y="7" height="14" fill="{CAUSE_COLORS[kind]}"><title>{e(tip)}</title></rect>'
            )
        for a, b in crit_by_rank.get(lane.rank, []):
            # A black line with a white edge along the middle of the lane where the critical
            # path runs on it: it reads over every colour of the palette, black host time
            # included (an outline vanished there), and a thin stretch stays a short line.
            x, w = 100.0 * (a - lo) / span, max(100.0 * (b - a) / span, 0.2)
            tip = f"critical path on rank {lane.rank}: {fg.fmt_duration(b - a)} from {fg.fmt_duration(a - lo)} into the step"
            parts.append(
                f'<g class="crit"><title>{e(tip)}</title>'
                f'<rect x="{_p(x)}" width="{_p(w)}" y="11.5" height="5" fill="#ffffff"/>'
                f'<rect x="{_p(x)}" width="{_p(w)}" y="12.5" height="3" fill="{CRITICAL_COLOR}"/></g>'
            )
        label = f"stage {lane.stage} · rank {lane.rank}" if lane.stage is not None else f"rank {lane.rank}"
        tag = f'<b class="tag">{SLOWEST}</b>' if lane.rank == slowest_rank and len(lanes) > 1 else ""
        rows.append(
            f'<span class="l">{e(label)}{tag}</span>'
            f'<svg width="100%" height="24" role="img" aria-label="{e(label)}">{"".join(parts)}</svg>'
            f'<span class="v">{e(fg.fmt_duration(lane.end_us - lane.start_us))}</span>'
        )
    ticks = nice_ticks(0.0, span)
    rows.append(_axis_row([t + lo for t in ticks], lo, hi, lambda t: tick_duration(t - lo)))
    kinds = [k for k in KINDS if k in present]
    extra = [("crit", CRITICAL_MEANS)] if marks["critical_path"] else []
    if slowest_rank is not None and any(lane.rank == slowest_rank for lane in lanes) and len(lanes) > 1:
        extra.append(("tagkey", f"{SLOWEST}: {SLOWEST_MEANS}"))
    head = legend(kinds, extra)
    shown = step_label or (f"step {marks['step']}" if marks["step"] is not None else None)
    if shown is not None:
        notes = [(f"{shown[:1].upper()}{shown[1:]}, the median step of the job: every rank on a common clock "
                  "(0 = the first rank's start); hover a segment to see what ran there.")]
    else:
        notes = [("The whole window (the trace has no step markers): every rank on a common clock "
                  "(0 = the first rank's start); hover a segment to see what ran there.")]
    if not marks["critical_path"]:
        pass
    elif marks["critical_path_source"] == "critical_rank_per_step":
        notes.append("Without a replay of the job, the rank that waited least in this step stands in for the critical path.")
    elif marks["critical_path_source"] == "replay":
        notes.append("The critical path is walked on the job's replay.")
    if marks["ranks_total"] > len(lanes):
        notes.append(f"Showing {len(lanes)} of {marks['ranks_total']} ranks (the one whose own work took longest in this step, the critical one and an even spread).")
    cap = f'<p class="muted small">{e(" ".join(notes))}</p>'
    return f'<figure class="fig" id="timeline">{head}<div class="rows">{"".join(rows)}</div>{cap}</figure>'


# --- bars per rank ---------------------------------------------------------------------------


def _segments_of(r: RankReport) -> list[tuple[str, float]]:
    return [("compute", r.compute_us)] + [(c.value, float(r.lost_us.get(c, 0.0))) for c in CAUSES]


def per_step_us(r: RankReport) -> float:
    """The rank's step time as the tables show it (the median step), else its window per
    profiled step, else the whole window (no step markers)."""
    step = fg.step_time_us(r)
    return step if step is not None else r.window_us


def rank_bars(ranks: Sequence[RankReport], absolute: bool) -> str:
    """A stacked bar per rank: compute then each cause, in milliseconds per step (all bars on
    one scale) or as shares of each rank's window."""
    ranks = [r for r in ranks if fg.has_data(r)]
    if not ranks:
        return ""
    scale = max(per_step_us(r) for r in ranks) if absolute else 0.0
    per_step = all(r.steps > 0 for r in ranks)
    rows = []
    for r in ranks:
        total = per_step_us(r) if absolute else r.window_us
        full = 100.0 * total / scale if absolute and scale > 0 else 100.0
        x = 0.0
        parts = []
        for kind, us in _segments_of(r):
            if us <= 0 or r.window_us <= 0:
                continue
            w = full * us / r.window_us
            amount = fg.fmt_duration(total * us / r.window_us if absolute else us)
            tip = f"rank {r.rank} · {kind}: {amount}{' per step' if absolute and r.steps > 0 else ''} ({fg.fmt_pct(fg.pct(us, r.window_us))})"
            parts.append(f'<rect x="{_p(x)}" width="{_p(w)}" y="2" height="14" fill="{CAUSE_COLORS[kind]}"><title>{e(tip)}</title></rect>')
            x += w
        value = fg.fmt_duration(total) if absolute else f"{fg.fmt_pct(fg.compute_pct(r))} compute"
        rows.append(
            f'<span class="l">rank {r.rank}</span><svg width="100%" height="18" role="img" aria-label="rank {r.rank}">'
            f'{"".join(parts)}</svg><span class="v">{e(value)}</span>'
        )
    if absolute:
        rows.append(_axis_row(nice_ticks(0.0, scale), 0.0, scale, tick_duration))
        title = "Milliseconds per step" if per_step else "Time in the window"
    else:
        rows.append(_axis_row([0, 25, 50, 75, 100], 0.0, 100.0, lambda t: f"{t:.0f}%"))
        title = "Share of each rank's window"
    return f'<figure class="fig"><figcaption>{e(title)}</figcaption><div class="rows">{"".join(rows)}</div></figure>'


def job_bar(lost_pct: Mapping[str, float | None], lost_us: Mapping[str, float]) -> str:
    """One bar of the whole job (compute and every cause, as shares), largest parts labelled;
    ``lost_us`` (time over all ranks) goes into the tooltips where known."""
    parts = []
    x = 0.0
    for kind in KINDS:
        pct = lost_pct.get(kind) or 0.0
        if pct <= 0:
            continue
        color = CAUSE_COLORS[kind]
        tip = f"{kind}: {fg.fmt_pct(pct)}" + (f" ({fg.fmt_duration(lost_us[kind])} over all ranks)" if kind in lost_us else "")
        parts.append(f'<rect x="{_p(x)}" width="{_p(pct)}" y="0" height="26" fill="{color}"><title>{e(tip)}</title></rect>')
        if pct >= 9:
            parts.append(
                f'<text x="{_p(x + pct / 2)}" y="17" text-anchor="middle" style="fill:{text_color_on(color)}">'
                f"{e(kind)} {pct:.0f}%</text>"
            )
        x += pct
    return f'<svg class="jobbar" width="100%" height="26" role="img" aria-label="where the job\'s time went">{"".join(parts)}</svg>'


# --- step time per step per rank -----------------------------------------------------------

MAX_DOT_RANKS = 64  # above this, each step shows the range over ranks instead of a dot per rank


def step_numbers(ranks: Sequence[RankReport]) -> list[int] | None:
    """The trace's numbers of the profiled steps (``ProfilerStep#N``, a timer's step), when
    every rank with steps records the same ones; ``None`` otherwise (older reports)."""
    seen: list[int] | None = None
    for r in ranks:
        nums = r.extra.get("step_numbers")
        if not r.step_times_us:
            continue
        if not isinstance(nums, list) or len(nums) != len(r.step_times_us) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in nums
        ):
            return None
        if seen is None:
            seen = list(nums)
        elif seen != nums:
            return None
    return seen


def step_times_chart(ranks: Sequence[RankReport], critical_by_index: Mapping[int, int]) -> str:
    """Step time of every profiled step of every rank (a dot each), the job's step time (the
    longest rank's step per step) as a line, and each step's pace-setter ringed. Steps
    are numbered as the trace numbers them (as the timeline's caption does); with one
    step there is nothing to chart (the timeline shows it)."""
    ranks = [r for r in ranks if fg.has_data(r) and r.step_times_us]
    n_steps = max((len(r.step_times_us) for r in ranks), default=0)
    if not ranks or n_steps < 2:
        return ""
    traced = step_numbers(ranks)
    numbers = traced or list(range(1, n_steps + 1))
    axis_note = "step, as the trace numbers them" if traced else "profiled step (1 = the first)"

    def label(i: int) -> str:
        return f"step {numbers[i]}" if i < len(numbers) else f"step {i + 1}"

    top = max(t for r in ranks for t in r.step_times_us)
    ticks = nice_ticks(0.0, top, 4)
    if len(ticks) >= 2 and ticks[-1] < top:  # one more tick above the slowest step
        ticks.append(ticks[-1] + (ticks[1] - ticks[0]))
    ymax = max(ticks[-1], top) if ticks else top
    h, pad = 150, 8
    plot_h = h - 2 * pad

    def y(us: float) -> float:
        return pad + plot_h * (1.0 - us / ymax) if ymax > 0 else pad + plot_h

    def x(i: int) -> float:
        return 100.0 * (i + 0.5) / n_steps

    parts = [f'<line x1="0%" x2="100%" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>' for t in ticks]
    worst = [max((r.step_times_us[i] for r in ranks if i < len(r.step_times_us)), default=0.0) for i in range(n_steps)]
    for i in range(n_steps - 1):
        parts.append(f'<line x1="{_p(x(i))}" x2="{_p(x(i + 1))}" y1="{y(worst[i]):.1f}" y2="{y(worst[i + 1]):.1f}" class="jobline"/>')
    many = len(ranks) > MAX_DOT_RANKS
    for i in range(n_steps):
        vals = sorted((r.step_times_us[i], r.rank) for r in ranks if i < len(r.step_times_us))
        if many:
            lo_v, hi_v = vals[0][0], vals[-1][0]
            tip = f"{label(i)}: {len(vals)} ranks from {fg.fmt_duration(lo_v)} (rank {vals[0][1]}) to {fg.fmt_duration(hi_v)} (rank {vals[-1][1]})"
            parts.append(
                f'<line x1="{_p(x(i))}" x2="{_p(x(i))}" y1="{y(lo_v):.1f}" y2="{y(hi_v):.1f}" class="range"><title>{e(tip)}</title></line>'
            )
        else:
            for us, rank in vals:
                tip = f"rank {rank}, {label(i)}: {fg.fmt_duration(us)}"
                parts.append(f'<circle cx="{_p(x(i))}" cy="{y(us):.1f}" r="3.5" class="dot"><title>{e(tip)}</title></circle>')
        crit = critical_by_index.get(i)
        mine = next((r.step_times_us[i] for r in ranks if r.rank == crit and i < len(r.step_times_us)), None)
        if crit is not None and mine is not None:
            parts.append(
                f'<circle cx="{_p(x(i))}" cy="{y(mine):.1f}" r="6.5" class="ring"><title>{e(f"{label(i)}: rank {crit}, the {fg.PACE_SETTER}")}</title></circle>'
            )
    ylabels = "".join(
        f'<text x="100%" y="{y(t) + 4:.1f}" text-anchor="end" dx="-4">{e(tick_duration(t))}</text>' for t in ticks
    )
    step_every = max(1, math.ceil(n_steps / 12))
    xlabels = "".join(
        f'<text x="{_p(x(i))}" y="13" text-anchor="middle">{e(numbers[i] if i < len(numbers) else i + 1)}</text>'
        for i in range(0, n_steps, step_every)
    )
    keys = [("dotkey", "a rank's step"), ("linekey", "the job's step (the longest of the ranks' steps in that step)")]
    if critical_by_index:
        keys.append(("ringkey", PACE_MEANS))
    if many:
        keys[0] = ("rangekey", "range over ranks")
    head = legend([], keys)
    return (
        f'<figure class="fig">{head}<div class="plot2">'
        f'<svg class="ylab" width="64" height="{h}" aria-hidden="true">{ylabels}</svg>'
        f'<svg width="100%" height="{h}" role="img" aria-label="step time per step">{"".join(parts)}</svg>'
        f'<span></span><svg class="axis" width="100%" height="18" aria-hidden="true">{xlabels}</svg>'
        f'</div><p class="muted small">{e(axis_note)}</p></figure>'
    )


# --- NVML utilization ----------------------------------------------------------------------

GPU_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")


def utilization_chart(points: Sequence[sf.UtilPoint]) -> str:
    """GPU utilization over the run, one step line per GPU (each sample holds its value until
    the next, or over its own bin); gaps where a sample had no value. A single point in time
    is a sentence, not a chart."""
    if not points:
        return ""
    by_gpu: dict[str, list[sf.UtilPoint]] = {}
    for p in points:
        by_gpu.setdefault(p.gpu, []).append(p)
    ends: dict[tuple[str, int], float] = {}
    t_lo = min(p.t_s for p in points)
    t_hi = t_lo
    for gpu, pts in by_gpu.items():
        pts.sort(key=lambda p: p.t_s)
        gaps = [b.t_s - a.t_s for a, b in zip(pts, pts[1:]) if b.t_s > a.t_s]
        width = min(gaps) if gaps else 0.0
        for i, p in enumerate(pts):
            end = p.end_s if p.end_s is not None and p.end_s > p.t_s else (pts[i + 1].t_s if i + 1 < len(pts) else p.t_s + width)
            ends[(gpu, i)] = end
            t_hi = max(t_hi, end)
    if t_hi <= t_lo:
        vals = ", ".join(f"GPU {g}: {fg.fmt_pct(p[0].util_pct, 0)}" for g, p in sorted(by_gpu.items()))
        return f'<p class="muted">One utilization sample per GPU, at {t_lo:.2f} s ({e(vals)}): too short a run to draw.</p>'
    span = t_hi - t_lo
    h = 160
    lines = []
    for v in (0, 50, 100):
        lines.append(f'<line x1="0" x2="1000" y1="{100 - v}" y2="{100 - v}" class="grid" vector-effect="non-scaling-stroke"/>')
    keys = []
    for gi, (gpu, pts) in enumerate(sorted(by_gpu.items(), key=lambda kv: (len(kv[0]), kv[0]))):
        color = GPU_COLORS[gi % len(GPU_COLORS)]
        run: list[str] = []
        for i, p in enumerate(pts):
            if p.util_pct is None:
                if run:
                    lines.append(_polyline(run, color, gpu))
                run = []
                continue
            yv = 100.0 - min(max(p.util_pct, 0.0), 100.0)
            x0 = 1000.0 * (p.t_s - t_lo) / span
            x1 = 1000.0 * (ends[(gpu, i)] - t_lo) / span
            if run and i > 0:
                prev_end = ends[(gpu, i - 1)]
                if p.t_s - prev_end > (prev_end - pts[i - 1].t_s) * 1.01 + 1e-9:
                    lines.append(_polyline(run, color, gpu))  # more than one bin without a sample: a gap
                    run = []
                elif p.t_s > prev_end:
                    run.append(f"{x0:.2f},{run[-1].split(',')[1]}")  # one empty bin: hold the level
            run += [f"{x0:.2f},{yv:.2f}", f"{x1:.2f},{yv:.2f}"]
        if run:
            lines.append(_polyline(run, color, gpu))
        keys.append(f'<span><i style="background:{color}"></i>GPU {e(gpu)}</span>')
    ylabels = "".join(
        f'<text x="100%" y="{(108 - v) * h / 116 + 4:.1f}" text-anchor="end" dx="-4">{v}%</text>' for v in (0, 50, 100)
    )  # the plot's viewBox runs from -8 to 108 over the chart's height
    ticks = nice_ticks(t_lo, t_hi)
    unit_ms = span < 2.0
    fmt = (lambda t: f"{1000 * (t - t_lo):,.0f} ms") if unit_ms else (lambda t: f"{t - t_lo:,.1f} s")
    axis = _axis_row(ticks, t_lo, t_hi, fmt, label_cols=1, value_col=False)
    missing = sum(1 for p in points if p.util_pct is None)
    note = f'<p class="muted">{missing} sample(s) had no utilization value (N/A); the line has gaps there.</p>' if missing else ""
    return (
        f'<figure class="fig"><div class="legend">{"".join(keys)}</div><div class="plot2">'
        f'<svg class="ylab" width="64" height="{h}" aria-hidden="true">{ylabels}</svg>'
        f'<svg width="100%" height="{h}" viewBox="0 -8 1000 116" preserveAspectRatio="none" role="img" '
        f'aria-label="GPU utilization over time">{"".join(lines)}</svg>{axis}</div>'
        f'<p class="muted small">time since the first sample</p></figure>{note}'
    )


def _polyline(points: Sequence[str], color: str, gpu: str) -> str:
    return (
        f'<polyline fill="none" stroke="{color}" stroke-width="2" vector-effect="non-scaling-stroke" '
        f'points="{" ".join(points)}"><title>GPU {e(gpu)}</title></polyline>'
    )
