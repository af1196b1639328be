"""The figures of a whole run (``step_clock``, ``phases``, ``windows``, ``changes`` of a
session's report), for every renderer: computed once here, read defensively (a saved report
may come from anywhere), ``None`` where the report does not say.

The keys are made by :mod:`gpuprof.pipeline.runreport` (schema: ``gpuprof schema``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprof.model.report import Report
from gpuprof.render.figures import fmt_duration, number


@dataclass(frozen=True)
class StepSeries:
    """The job's step time for the plot: one point per step, or per bin of steps."""

    step: tuple[int, ...]
    last_step: tuple[int, ...]
    median_us: tuple[float, ...]
    min_us: tuple[float, ...]
    max_us: tuple[float, ...]
    binned: bool


@dataclass(frozen=True)
class WindowRow:
    window: int
    first_step: int | None
    last_step: int | None
    why: str
    status: str
    traces_kept: bool
    top: str | None  # the top cause in a few words
    step_us: float | None


@dataclass(frozen=True)
class PhaseBand:
    kind: str
    start_s: float
    end_s: float
    first_step: int | None
    last_step: int | None


@dataclass(frozen=True)
class RunView:
    headline: str | None  # steps, processes, median step
    changes: tuple[str, ...]
    change_steps: tuple[int, ...]
    phases: tuple[str, ...]  # one line per kind
    bands: tuple[PhaseBand, ...]
    windows: tuple[WindowRow, ...]
    slowest: str | None
    series: StepSeries | None

    @property
    def sentences(self) -> tuple[str, ...]:
        """The run's lines before its phases, in the order every format shows them."""
        return tuple(x for x in (self.headline, *self.changes, self.slowest) if x)

    @property
    def empty(self) -> bool:
        return not (self.headline or self.changes or self.phases or len(self.windows) > 1 or self.slowest)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _series(clock: Mapping[str, Any]) -> StepSeries | None:
    s = clock.get("series")
    if not isinstance(s, Mapping):
        return None
    cols = {}
    for key in ("step", "last_step", "median_us", "min_us", "max_us"):
        vals = s.get(key)
        if not isinstance(vals, list):
            return None
        cols[key] = vals
    n = len(cols["step"])
    if n == 0 or any(len(v) != n for v in cols.values()):
        return None
    try:
        return StepSeries(tuple(int(x) for x in cols["step"]), tuple(int(x) for x in cols["last_step"]),
                          tuple(float(x) for x in cols["median_us"]), tuple(float(x) for x in cols["min_us"]),
                          tuple(float(x) for x in cols["max_us"]), bool(s.get("binned")))
    except (TypeError, ValueError):
        return None


def top_words(diag: Any) -> str | None:
    """A window diagnosis's top cause in a few words."""
    if not isinstance(diag, Mapping):
        return None
    if not diag.get("ok", False):
        err = diag.get("error")
        return f"not diagnosed: {err}" if isinstance(err, str) else "not diagnosed"
    top = diag.get("top")
    if not isinstance(top, list) or not top or not isinstance(top[0], Mapping):
        return "no cause stands out"
    t = top[0]
    cause = str(t.get("cause", "?"))
    saved, pct = number(t.get("saved_us_per_step")), number(t.get("savings_pct"))
    us, share = number(t.get("us_per_step")), number(t.get("pct_of_step"))
    if saved is not None and pct is not None:
        words = f"{cause}: saves {fmt_duration(saved)}/step ({pct:.0f}%)"
    elif us is not None and share is not None:
        words = f"{cause} {fmt_duration(us)}/step ({share:.0f}% of the step)"
    else:
        words = cause
    crit, waiting = _int(diag.get("critical_rank")), diag.get("waiting_ranks")
    if crit is not None and isinstance(waiting, list) and waiting:
        words += f", on rank {crit} (the others wait for it)"
    return words


def _windows(report: Report) -> tuple[WindowRow, ...]:
    rows = report.extra.get("windows")
    out: list[WindowRow] = []
    for w in rows if isinstance(rows, list) else ():
        if not isinstance(w, Mapping) or _int(w.get("window")) is None:
            continue
        diag = w.get("diagnosis")
        detail = w.get("detail")
        why = detail if isinstance(detail, str) else str(w.get("reason") or "")
        out.append(WindowRow(
            window=int(w["window"]), first_step=_int(w.get("start_step")), last_step=_int(w.get("last_step")),
            why=why, status=str(w.get("status") or "?"), traces_kept=bool(w.get("traces_kept")),
            top=top_words(diag), step_us=number(diag.get("step_us")) if isinstance(diag, Mapping) else None,
        ))
    return tuple(out)


def _phases(report: Report) -> tuple[tuple[str, ...], tuple[PhaseBand, ...]]:
    ph = report.extra.get("phases")
    if not isinstance(ph, Mapping):
        return (), ()
    lines: list[str] = []
    by_kind = ph.get("by_kind")
    if isinstance(by_kind, Mapping):
        for kind, k in by_kind.items():
            if not isinstance(k, Mapping):
                continue
            share, idle, util = number(k.get("share_pct")), number(k.get("idle_pct")), number(k.get("util_mean_pct"))
            n = _int(k.get("phases")) or 0
            text = f"{kind}: {share:.0f}% of the run" if share is not None else f"{kind}"
            text += f" in {n} phase{'s' if n != 1 else ''}"
            extra = []
            if util is not None:
                extra.append(f"GPU utilization {util:.0f}%")
            if idle is not None:
                extra.append(f"idle {idle:.0f}% of the time")
            if extra:
                text += " (" + ", ".join(extra) + ")"
            lines.append(text)
    if ph.get("rl_post_training") is True:
        lines.insert(0, "RL post-training: rollout (generation) alternates with update (optimizer steps)")
    bands: list[PhaseBand] = []
    segs = ph.get("segments")
    for s in segs if isinstance(segs, list) else ():
        if not isinstance(s, Mapping):
            continue
        a, b = number(s.get("start_s")), number(s.get("end_s"))
        if a is None or b is None or b < a:
            continue
        bands.append(PhaseBand(str(s.get("kind", "?")), a, b, _int(s.get("first_step")), _int(s.get("last_step"))))
    return tuple(lines), tuple(bands)


def run_view(report: Report) -> RunView | None:
    """What every renderer shows of the whole run; ``None`` for a report without it."""
    keys = ("step_clock", "phases", "windows", "changes")
    if not any(k in report.extra for k in keys):
        return None
    clock = report.extra.get("step_clock")
    clock = clock if isinstance(clock, Mapping) else {}
    headline = None
    steps, procs, median = _int(clock.get("steps")), _int(clock.get("processes")), number(clock.get("median_us"))
    if steps:
        headline = (f"{steps:,} timed steps over {procs or 1} process{'es' if (procs or 1) != 1 else ''}, "
                    f"median step {fmt_duration(median) if median is not None else 'N/A'} by the job's own clock")
    changes: list[str] = []
    change_steps: list[int] = []
    raw = report.extra.get("changes")
    for c in raw if isinstance(raw, list) else ():
        if isinstance(c, Mapping) and isinstance(c.get("text"), str):
            changes.append(c["text"])
            if _int(c.get("step")) is not None:
                change_steps.append(int(c["step"]))
    slow = clock.get("slowest_rank")
    slowest = None
    if isinstance(slow, Mapping) and _int(slow.get("rank")) is not None:
        ex, pct = number(slow.get("excess_us")), number(slow.get("slowest_pct"))
        first, last = _int(slow.get("first_step")), _int(slow.get("last_step"))
        slowest = (f"rank {slow['rank']} is consistently the slowest: it reaches backward "
                   f"{fmt_duration(ex) if ex is not None else 'N/A'} after the others (median), the last in "
                   f"{pct:.0f}% of steps {first}-{last}" if pct is not None else f"rank {slow['rank']} is the slowest")
    phases, bands = _phases(report)
    return RunView(headline, tuple(changes), tuple(change_steps), phases, bands, _windows(report), slowest,
                   _series(clock))


def window_table(view: RunView) -> Sequence[tuple[str, str, str, str, str]]:
    """Rows of the windows table: window, steps, why, traces, what it found."""
    rows = []
    for w in view.windows:
        steps = f"{w.first_step}-{w.last_step}" if w.first_step is not None and w.last_step is not None else "?"
        kept = "kept" if w.traces_kept else ("pruned" if w.status == "recorded" else w.status)
        rows.append((str(w.window), steps, w.why, kept, w.top or ("" if w.status == "recorded" else w.status)))
    return rows


__all__ = ["PhaseBand", "RunView", "StepSeries", "WindowRow", "run_view", "top_words", "window_table"]
