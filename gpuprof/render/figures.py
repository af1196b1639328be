"""Figures every human-facing renderer shows, computed once so text, Markdown and HTML agree.

All inputs are :class:`~gpuprof.model.report.Report` objects; nothing here formats for one
medium. Shares are percentages of the analysis window (0-100); times are microseconds unless
the name says ``_ms``. Unknown values are ``None`` and render as "N/A", never as 0.

These are the figures of the analysis (steps, shares, savings, what the report covers);
those of the NVML samples are :mod:`gpuprof.render.sample_figures`, the charts' colours
:mod:`gpuprof.render.palette`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprof.model.causes import REGISTRY
from gpuprof.model.report import CAUSES, Cause, RankReport, Recommendation, Report
from gpuprof.render.phrases import say
from gpuprof.util import phrases

NA = phrases.NA

# Short labels for narrow tables (each cause's declaration, gpuprof.model.causes); the full
# cause names appear in the totals.
CAUSE_SHORT: Mapping[Cause, str] = {c: REGISTRY[c].short for c in CAUSES}

# Above this many ranks, tables summarize (lowest and highest compute share) instead of
# printing one row per rank.
MANY_RANKS = 16


def pct(part: float | None, whole: float | None) -> float | None:
    """``part`` as a percentage of ``whole``; ``None`` when either is unknown or whole is 0."""
    if part is None or whole is None or whole <= 0 or not math.isfinite(whole):
        return None
    return 100.0 * part / whole


def fmt_pct(value: float | None, digits: int = 1) -> str:
    return phrases.pct(value, digits)


def fmt_ms(value_us: float | None, digits: int = 1) -> str:
    """Microseconds shown as milliseconds."""
    return NA if value_us is None else f"{value_us / 1000.0:,.{digits}f}"


def fmt_duration(value_us: float | None) -> str:
    """A duration with its unit, in the one style every report uses (:func:`gpuprof.util.phrases.duration`):
    ``850 µs``, ``12.3 ms``, ``4.20 s``."""
    return phrases.duration(value_us)


def number(value: Any) -> float | None:
    """A value read from the report's ``extra`` (JSON owned elsewhere) as a finite number;
    ``None`` for anything else (a string, a bool, NaN, infinity, a missing key)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def has_data(rank: RankReport) -> bool:
    """A rank with a window to analyze. A CPU-only trace has none: the analysis says so with
    an empty window or a ``note`` (the summarizer's ``empty_reason``)."""
    return rank.window_us > 0 and not rank.extra.get("note")


# The one step statistic of every report: the mean step (the window over its steps), which
# is what the replay measures the job's step and every saving by, and what a run's length
# follows. Named wherever it is shown.
STEP_STAT = "mean step"


def step_time_us(rank: RankReport) -> float | None:
    """The rank's mean step in microseconds (window / steps); ``None`` without steps."""
    if rank.steps > 0 and rank.window_us > 0:
        return rank.window_us / rank.steps
    return None


def job_step_time_us(report: Report) -> float | None:
    """The job's step: the slowest rank's mean step (synchronous ranks wait for it), the
    step the what-if replay measures (``job.whatif.measured_step_us``)."""
    times = [t for t in (step_time_us(r) for r in report.ranks if has_data(r)) if t is not None]
    return max(times) if times else None


def no_steps(report: Report) -> bool:
    """No rank with data has step markers: the window is the unit of every figure."""
    data = [r for r in report.ranks if has_data(r)]
    return bool(data) and not any(r.steps > 0 for r in data)


def window_note(report: Report) -> str | None:
    """What the window is when there are no steps: ``no step markers: the window is first to
    last GPU activity, 84.5 ms``."""
    if not no_steps(report):
        return None
    longest = max(r.window_us for r in report.ranks if has_data(r))
    return say("window.note", longest=phrases.duration(longest))


def saving_phrase(rec: Recommendation, report: Report) -> str:
    """A recommendation's saving as every renderer writes it: the share (an estimate ``~``,
    or a bound ``≤``/``≥``), what it is a share of, then in parentheses the time it saves,
    its range and every caveat on it: ``saves ≤61.5% of step time (11.6 ms per step;
    upper bound: 1 of 8 ranks profiled)``."""
    sign = {"upper": "≤", "lower": "≥"}.get(rec.savings_bound or "", "~")
    window = no_steps(report)
    text = say("saving.window" if window else "saving.step", sign=sign, pct=rec.estimated_savings_pct)
    extras: list[str] = []
    if rec.saved_us_per_step is not None and rec.saved_us_per_step > 0:
        extras.append(say("saving.time_window" if window else "saving.time_step", saved=phrases.duration(rec.saved_us_per_step)))
    low, high = rec.savings_low_pct, rec.savings_high_pct
    if low is not None and high is not None:
        # A bound is the end of its range: the other end is what is left to say.
        shown = f"{rec.estimated_savings_pct:.1f}"
        if rec.savings_bound == "upper" and f"{high:.1f}" == shown and f"{low:.1f}" != shown:
            extras.append(say("saving.at_least", low=low))
        elif rec.savings_bound == "lower" and f"{low:.1f}" == shown and f"{high:.1f}" != shown:
            extras.append(say("saving.at_most", high=high))
        else:
            extras.append(say("saving.between", low=low, high=high))
    extras += list(rec.caveats)
    return say("saving.details", saving=text, details="; ".join(extras)) if extras else text


@dataclass(frozen=True)
class View:
    """How much of the report a reader asked for: ``brief`` (the ranked titles and their
    savings only) and ``top`` (at most this many recommendations; ``None``: all)."""

    brief: bool = False
    top: int | None = None

    def shown(self, report: Report) -> tuple[Recommendation, ...]:
        recs = report.recommendations
        return recs if self.top is None else recs[: max(0, self.top)]

    def hidden(self, report: Report) -> int:
        return len(report.recommendations) - len(self.shown(report))

    def combined(self, report: Report) -> str | None:
        """The combined replay's line, when every recommendation it names is shown."""
        line = combined_line(report)
        shown = len(self.shown(report))
        if line is None or any(r.whatif for r in report.recommendations[shown:]):
            return None
        return line


FULL = View()


def report_caveats(report: Report) -> list[str]:
    """What qualifies every estimate of the report, said once under its headline."""
    data = [r for r in report.ranks if has_data(r)]
    out = []
    if data and report.recommendations and max(r.steps for r in data) == 1:
        out.append(say("caveat.one_step"))
    return out


# The roles a report gives ranks: one name each, with one meaning, the same in every
# format, and said in the report wherever a role is named (a legend, or a line of the
# cross-rank findings). "Slowest" is none of them: in a synchronous job every rank's step
# is about as long, and the rank the others wait for is the pace-setter, not the one whose
# step came out a hair longer.
LONGEST_STEP = "longest step"
PACE_SETTER = "pace-setter"
BUSIEST = "busiest"
ROLES: dict[str, str] = {
    LONGEST_STEP: "the rank whose mean step is the longest (the job's step time is its step)",
    PACE_SETTER: "in a step, the rank that waited least, the one the others waited for",
    BUSIEST: "the rank with the most compute per step",
}


def role_legend(role: str) -> str:
    """``pace-setter: in a step, the rank that waited least, ...``."""
    return f"{role}: {ROLES[role]}"


def slowest_rank(report: Report) -> int | None:
    """The rank with the longest step (:func:`step_time_us`), whose step is the job's step
    time (:func:`job_step_time_us`); ties go to the lowest rank. Named by the role
    :data:`LONGEST_STEP` in every report, never "the slowest"."""
    timed = [(t, r.rank) for r in report.ranks if has_data(r) and (t := step_time_us(r)) is not None]
    if not timed:
        return None
    longest = max(t for t, _ in timed)
    return min(rank for t, rank in timed if t == longest)


def step_card_label(report: Report) -> str:
    """What the job's step time is, in a few words: ``mean step of rank 3, the longest of
    any rank`` (the role :data:`LONGEST_STEP`, said in words that need no legend)."""
    slow = slowest_rank(report)
    n = sum(1 for r in report.ranks if has_data(r))
    if slow is None:
        return say("step_card.window") if no_steps(report) else STEP_STAT
    return STEP_STAT if n <= 1 else say("step_card.longest", stat=STEP_STAT, rank=slow)


def compute_pct(rank: RankReport) -> float | None:
    return pct(rank.compute_us, rank.window_us)


def lost_pct(rank: RankReport, cause: Cause) -> float | None:
    return pct(float(rank.lost_us.get(cause, 0.0)), rank.window_us)


@dataclass(frozen=True)
class JobShares:
    """Job totals: compute and each cause as a share of all ranks' windows summed."""

    window_us: float
    compute_us: float
    lost_us: Mapping[Cause, float]
    compute_pct: float | None
    lost_pct: Mapping[Cause, float | None]


def job_shares(report: Report) -> JobShares:
    """Totals over the ranks that have data, so a CPU-only rank does not dilute the shares."""
    ranks = [r for r in report.ranks if has_data(r)]
    window = float(sum(r.window_us for r in ranks))
    compute = float(sum(r.compute_us for r in ranks))
    lost = {c: float(sum(float(r.lost_us.get(c, 0.0)) for r in ranks)) for c in CAUSES}
    return JobShares(
        window_us=window,
        compute_us=compute,
        lost_us=lost,
        compute_pct=pct(compute, window),
        lost_pct={c: pct(lost[c], window) for c in CAUSES},
    )


def nothing_to_analyze(report: Report) -> str | None:
    """Why the report has nothing to show (no ranks, or only CPU-only ranks), else ``None``."""
    if not report.ranks:
        if report.extra.get("samples"):
            return say("nothing.samples_only")
        return say("nothing.no_rank")
    if any(has_data(r) for r in report.ranks):
        return None
    notes = sorted({str(r.extra.get("note")) for r in report.ranks if r.extra.get("note")})
    why = "; ".join(notes) if notes else say("nothing.no_gpu")
    return say("nothing.why", why=why)


GPU_WOULD_ADD = (
    "on a GPU, gpuprof splits each step into GPU compute and time lost to input loading, "
    "synchronization, host overhead, communication, memory and pipeline bubbles, and ranks what to change"
)


@dataclass(frozen=True)
class CpuOnly:
    """What a run without GPU activity measured: a headline and one line per fact."""

    headline: str
    lines: tuple[str, ...]


def _host_line(rank: RankReport, h: Mapping[str, Any]) -> str | None:
    steps, step = h.get("profiled_steps"), number(h.get("step_us"))
    if not isinstance(steps, int) or steps <= 0 or step is None or step <= 0:
        return None
    pieces = [say("host.steps", rank=rank.rank, steps=phrases.count(steps, "profiled step"), stat=STEP_STAT, step=phrases.duration(step))]
    op = number(h.get("op_us"))
    if op:
        pieces.append(say("host.ops", op=phrases.duration(op), share=phrases.pct(100.0 * op / step, 0)))
    coll = number(h.get("collective_us"))
    if coll:
        backend = h.get("collective_backend")
        what = say("host.backend_collectives", backend=backend) if isinstance(backend, str) and backend else "collectives"
        pieces.append(say("host.collectives", coll=phrases.duration(coll), share=phrases.pct(100.0 * coll / step, 0), what=what))
    return "".join(pieces)


def cpu_only_summary(report: Report) -> CpuOnly | None:
    """What a CPU-only run measured (steps, mean step, host time inside operators and
    collectives, per rank), said the same way by every renderer and at the end of
    ``gpuprof run``; ``None`` unless nothing ran on a GPU and something was measured."""
    if any(has_data(r) for r in report.ranks):
        return None
    got = report.extra.get("run")
    run: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
    hosts = [(r, h) for r in report.ranks if isinstance(h := r.extra.get("host_steps"), Mapping)]
    if not hosts and not (run.get("cpu_only") and not report.extra.get("samples")):
        return None
    lines: list[str] = []
    steps = run.get("optimizer_steps")
    if isinstance(steps, int) and steps > 0:
        text = phrases.count(steps, "optimizer step")
        # The job's own clock counts every optimizer step, the profiler's pauses (warm-up,
        # writing the trace) among them: the median, not the mean, says what a step takes.
        median = number(run.get("step_time_median_us"))
        if median is not None:
            text += say("cpu_only.median", median=phrases.duration(median))
        lines.append(text)
    elif run.get("cpu_only"):
        lines.append(say("cpu_only.no_step"))
    for rank, h in hosts:
        line = _host_line(rank, h)
        if line is not None:
            lines.append(line)
    if not lines:
        return None
    lines.append(GPU_WOULD_ADD)
    return CpuOnly(say("cpu_only.headline"), tuple(lines))


def shown_warnings(report: Report) -> list[str]:
    """The report's warnings as the human-facing renderers list them: less what the body of
    the report already says (a CPU-only rank's note is the CPU-only summary's headline, a
    single profiled step the caveat under the headline, a profiler that slowed the host the
    caveat beside the savings it inflates)."""
    said: set[str] = set()
    if cpu_only_summary(report) is not None:
        said = {str(r.extra["note"]) for r in report.ranks if r.extra.get("note") and r.extra.get("host_steps")}
    if report_caveats(report):
        said.add(phrases.ONE_PROFILED_STEP)
    beside = report.extra.get("warnings_on_savings")
    if isinstance(beside, list):
        said |= {str(w) for w in beside}
    return [w for w in report.warnings if not any(w == n or w.endswith(": " + n) for n in said)]


def no_recommendation(report: Report) -> str:
    """What to say when the report has no recommendation: nothing stands out, or what
    stood out was held back because the trace cannot support it (see gpuprof.advice)."""
    held = report.extra.get("held_back") or []
    if held:
        return say("held_back", n=len(held))
    return say("no_recommendation")


def combined_line(report: Report) -> str | None:
    """What the replayed recommendations save together, from one replay of the job
    (``job.combined_savings_pct``), naming them by their place in the ranking and saying,
    from the numbers, how that compares with their savings one by one: ``Recommendations
    1, 2 and 4 replayed together: step 2.21 s -> 1.47 s, 33.5% saved, more than the 31.4%
    they save one by one: these fixes reinforce each other.``"""
    job = report.extra.get("job") if isinstance(report.extra.get("job"), dict) else None
    combined = number((job or {}).get("combined_savings_pct"))
    whatif = (job or {}).get("whatif") if isinstance((job or {}).get("whatif"), dict) else None
    step = number((whatif or {}).get("measured_step_us"))
    replayed = [(i, r) for i, r in enumerate(report.recommendations, 1) if r.whatif]
    if combined is None or step is None or len(replayed) < 2:
        return None
    by_whatif: dict[str, float] = {}
    for _, r in replayed:
        by_whatif[str(r.whatif)] = max(by_whatif.get(str(r.whatif), 0.0), r.estimated_savings_pct)
    total = sum(by_whatif.values())
    if combined < total - 0.5:
        relation = say("combined.less", total=total)
    elif combined > total + 0.5:
        relation = say("combined.more", total=total)
    else:
        relation = say("combined.about", total=total)
    every = len(replayed) == len(report.recommendations)
    names = phrases.join_words([str(i) for i, _ in replayed])
    who = say("combined.all", n=len(replayed)) if every else say("combined.some", names=names)
    unit = "window" if no_steps(report) else "step"
    after = phrases.duration(step * (1 - combined / 100))
    return say("combined.line", who=who, unit=unit, step=phrases.duration(step), after=after, combined=combined, relation=relation)


def ranks_to_show(report: Report, limit: int = MANY_RANKS) -> tuple[list[RankReport], str | None]:
    """All ranks when there are few; otherwise the lowest and highest compute shares and a note."""
    ranks = list(report.ranks)
    if len(ranks) <= limit:
        return ranks, None
    keyed = sorted(ranks, key=lambda r: (compute_pct(r) if compute_pct(r) is not None else -1.0, r.rank))
    half = max(1, limit // 4)
    chosen = {r.rank: r for r in keyed[:half] + keyed[-half:]}
    shares = [c for c in (compute_pct(r) for r in ranks) if c is not None]
    spread = ""
    if shares:
        spread = say("ranks_shown.spread", low=min(shares), median=statistics.median(shares), high=max(shares))
    note = say("ranks_shown.note", half=half, n=len(ranks), spread=spread)
    return sorted(chosen.values(), key=lambda r: r.rank), note


def ranks_phrase(ranks: Sequence[int], max_parts: int = 8) -> str:
    """``rank 3``, ``ranks 0-7, 12``, ``every rank`` (a recommendation with no ranks applies
    to all), at most ``max_parts`` runs (then ``(+3 more)``)."""
    values = sorted(set(ranks))
    if len(values) <= 1:
        return phrases.ranks(values)
    return f"ranks {rank_list(values, max_parts)}"


def scope_phrase(report: Report) -> str:
    """What the report covers, for its headline: ``8 ranks, 32 steps, mean step 2.21 s``;
    without step markers, what the window is."""
    n = len(report.ranks)
    note = window_note(report)
    if note is not None:
        return f"{phrases.count(n, 'rank')}, {note}"
    steps = max((r.steps for r in report.ranks), default=0)
    text = f"{phrases.count(n, 'rank')}, {phrases.count(steps, 'step')}"
    step = job_step_time_us(report)
    return text + (f", {STEP_STAT} {phrases.duration(step)}" if step is not None else "")


def rank_list(ranks: Sequence[int], max_parts: int = 8) -> str:
    """Ranks as compact ranges ("0-7, 12, 14-15", "4, 8, ..., 60"), at most ``max_parts`` parts;
    "all" when empty."""
    if not ranks:
        return "all"
    parts = phrases.span_parts(ranks)
    if len(parts) > max_parts:
        return ", ".join(parts[:max_parts]) + f" (+{len(parts) - max_parts} more)"
    return ", ".join(parts)


def top_causes(rank: RankReport, n: int = 2) -> list[tuple[Cause, float]]:
    """The ``n`` causes with the most lost time on this rank, as (cause, % of window), non-zero only."""
    out = [(c, lost_pct(rank, c) or 0.0) for c in CAUSES]
    out = [x for x in out if x[1] > 0.05]
    return sorted(out, key=lambda x: -x[1])[:n]
