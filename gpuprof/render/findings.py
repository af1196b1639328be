"""Cross-rank findings (the report's ``job`` key) as sentences and tables, for any medium.

The findings are nested JSON owned by the analysis, and they grow: the known ones get a
sentence that says what they mean; every finding, known or not, becomes tables of plain
values (:mod:`gpuprof.render.jsontables`). Everything here returns plain strings;
renderers escape them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuprof.model.report import Report
from gpuprof.render import figures as fg
from gpuprof.render.figures import number
from gpuprof.render.jsontables import MAX_ROWS, Table, caption_for, fmt_value, humanize, tables_of
from gpuprof.render.phrases import say, sentence
from gpuprof.util import phrases

# Titles of the findings the analysis writes today; unknown keys get their key, humanized.
TITLES: Mapping[str, str] = {
    "stragglers": "Stragglers",
    "straggler_analysis": "Arrival at collectives",
    "critical_rank_per_step": "Critical rank per step",
    "compute_imbalance": "Compute imbalance",
    "pipeline": "Pipeline schedule",
    "barrier_waits": "Waits at barriers",
    "collective_bandwidth": "Collective bandwidth per rank",
    "whatif": "What-if replay of the whole job",
}


# Job-level figures another part of the report already states (the combined replay's line
# under the recommendations, the what-if sentence): not repeated in the "Job" table.
SAID_ELSEWHERE = frozenset({"combined_savings_pct", "model_error_pct"})


@dataclass(frozen=True)
class Block:
    """One finding: a title, what it means in words, and its values as tables."""

    key: str
    title: str
    sentences: tuple[str, ...] = ()
    tables: tuple[Table, ...] = field(default=())


# --- sentences for the findings the analysis writes today --------------------------------


def _stragglers(v: Any) -> list[str]:
    out = []
    for s in v if isinstance(v, list) else []:
        if not isinstance(s, Mapping) or number(s.get("rank")) is None:
            continue
        pieces = [say("stragglers.arrived", rank=s["rank"], last=s.get("last_arrivals", "?"), collectives=s.get("collectives", "?"))]
        wait = number(s.get("caused_wait_us_per_step"))
        if wait is not None:
            pieces.append(say("stragglers.waited", wait=fg.fmt_duration(wait)))
        ratio = number(s.get("phase_ratio"))
        if s.get("phase") and ratio is not None:
            pieces.append(say("stragglers.phase", phase=s["phase"], ratio=ratio))
        out.append(sentence(*pieces))
    if isinstance(v, list) and not v:
        out.append(say("stragglers.none"))
    return out


def _arrivals(v: Any) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    out = []
    n = number(v.get("collectives_matched"))
    if n is not None:
        out.append(say("arrivals.matched", n=int(n)))
    offsets = v.get("clock_offsets_us")
    if isinstance(offsets, Mapping):
        vals = [abs(x) for x in (number(o) for o in offsets.values()) if x is not None]
        if vals and max(vals) > 0:
            out.append(say("arrivals.clocks", offset=fg.fmt_duration(max(vals))))
    arr = v.get("arrivals")
    if isinstance(arr, Mapping) and arr.get("rotating"):
        out.append(say("arrivals.rotating"))
    return out


def _critical(v: Any) -> list[str]:
    rows = [r for r in v if isinstance(r, Mapping) and number(r.get("rank")) is not None] if isinstance(v, list) else []
    if not rows:
        return []
    counts: dict[int, int] = {}
    for r in rows:
        counts[int(r["rank"])] = counts.get(int(r["rank"]), 0) + 1
    top = max(counts, key=lambda k: (counts[k], -k))
    if len(rows) == 1:
        return [say("critical.one_step", rank=top, role=fg.PACE_SETTER)]
    pieces = [say("critical.steps", rank=top, role=fg.PACE_SETTER, count=counts[top], steps=len(rows))]
    if len(counts) > 1:
        pieces.append(say("critical.spread", ranks=len(counts)))
    return [sentence(*pieces)]


def _imbalance(v: Any) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    out = []
    ar = v.get("across_ranks")
    if isinstance(ar, Mapping) and number(ar.get("max_over_median")) is not None:
        busiest, median = phrases.duration_pair(number(ar.get("max_compute_us_per_step")), number(ar.get("median_compute_us_per_step")))
        if busiest == median:
            out.append(say("imbalance.even", median=median))
        else:
            ratio = number(ar.get("max_over_median"))
            out.append(say("imbalance.busiest", role=fg.BUSIEST, rank=ar.get("max_rank"), ratio=ratio, busiest=busiest, median=median))
    st = v.get("across_stages")
    others = number(st.get("max_over_others_median")) if isinstance(st, Mapping) else None
    if isinstance(st, Mapping) and others is not None:
        out.append(say("imbalance.stage", stage=st.get("max_stage"), ratio=others))
    elif isinstance(st, Mapping) and number(st.get("max_over_median")) is not None:  # a report saved before
        out.append(say("imbalance.stage_saved", stage=st.get("max_stage"), ratio=number(st.get("max_over_median"))))
    return out


def _pipeline(v: Any) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    parts = []
    if v.get("stages") is not None:
        parts.append(say("pipeline.stages", n=v.get("stages")))
    if v.get("microbatches") is not None:
        parts.append(say("pipeline.microbatches", n=v.get("microbatches")))
    if v.get("schedule"):
        parts.append(say("pipeline.schedule", name=v.get("schedule")))
    pieces = [", ".join(parts)]
    stages = [r for r in v.get("per_stage") or [] if isinstance(r, Mapping) and number(r.get("bubble_fraction")) is not None]
    theory = number(v.get("theoretical_bubble_fraction"))
    if stages:
        worst = max(stages, key=lambda r: float(r["bubble_fraction"]))
        pieces.append(say("pipeline.bubble", pct=100 * float(worst["bubble_fraction"]), stage=worst.get("stage")))
        if theory is not None:
            pieces.append(say("pipeline.theory", pct=100 * theory))
    return [sentence(*pieces)] if "".join(pieces) else []


def _bandwidth(v: Any) -> list[str]:
    rows = [r for r in v.values() if isinstance(r, Mapping)] if isinstance(v, Mapping) else []
    notes = sorted({str(r["bandwidth_note"]) for r in rows if r.get("bandwidth_note")})
    # Bandwidth of messages under a megabyte says more about latency than about the link.
    big = [r for r in rows if (number(r.get("bytes_per_step")) or 0.0) >= 1e6]
    bus = sorted(x for x in (number(r.get("busbw_gbps")) for r in big) if x)
    if not bus:
        # The notes say why in full ("not measurable: the other members ..."): not twice.
        return [say("bandwidth.note_full" if n.startswith("not measurable") else "bandwidth.note", note=n) for n in notes[:2]]
    med = bus[len(bus) // 2]
    pieces = [say("bandwidth.median", gbps=med, ranks=len(bus))]
    peaks = [x for x in (number(r.get("peak_gbps")) for r in big) if x]
    if peaks:
        pieces.append(say("bandwidth.peak", pct=100 * med / max(peaks), peak=max(peaks)))
    slow = sum(int(number(r.get("slow_calls")) or 0) for r in rows)
    if slow:
        pieces.append(say("bandwidth.slow", n=slow))
    exposed = [x for x in (number(r.get("exposed_us_per_step")) for r in rows) if x is not None]
    if exposed:
        pieces.append(say("bandwidth.exposed", exposed=fg.fmt_duration(max(exposed))))
    return [sentence(*pieces)]


# The cause each what-if removes time of, to say why no recommendation carries it; and the
# what-ifs that bound a fix rather than stand for one.
WHATIF_CAUSE: Mapping[str, str] = {
    "no_dataloader": "dataloader", "no_sync": "sync", "free_launches": "host", "free_launch_calls": "host",
    "free_host": "host", "no_ddp_buffer_sync": "host", "no_allocator": "memory", "pinned_copies": "memory",
    "hidden_copies": "memory", "overlap_collectives": "communication", "double_bandwidth": "communication",
    "peer_median_compute": "straggler", "on_time_start": "straggler", "balanced_batches": "straggler",
    "balanced_stages": "pipeline_bubble", "double_microbatches": "pipeline_bubble",
}  # fmt: skip
NOT_A_FIX: Mapping[str, str] = {
    name: say(f"whatif.bound.{name}") for name in ("free_host", "free_launch_calls", "double_bandwidth", "no_variation")
}


@dataclass(frozen=True)
class Context:
    """What the findings' sentences may say about the rest of the report: which what-if
    each recommendation carries (by its place in the ranking), each cause's share of the
    job's time (%), the causes whose recommendation was held back, per cause the first
    recommendation acting on it (its place, and whether it carries a what-if), each
    carrying recommendation's own saving and range (%), and how many ranks have data."""

    carried: Mapping[str, int] = field(default_factory=dict)
    shares: Mapping[str, float] = field(default_factory=dict)
    held_back: frozenset[str] = frozenset()
    acting: Mapping[str, tuple[int, bool]] = field(default_factory=dict)
    savings: Mapping[int, tuple[float, float | None, float | None]] = field(default_factory=dict)
    ranks: int = 2


# Findings that compare ranks: a report of one rank has nothing to say in them (no rank
# to arrive last, no clock to align, no balance to weigh).
CROSS_RANK = frozenset({"stragglers", "straggler_analysis", "critical_rank_per_step", "compute_imbalance", "barrier_waits"})


def section_title(ctx: Context) -> str:
    """The heading of the job-level findings: what they compare."""
    return "Across ranks" if ctx.ranks > 1 else "The job as a whole"


def _why_not(name: str, ctx: Context) -> str | None:
    """Why no recommendation carries what-if ``name``; ``None`` when one acts on the same
    time with an estimate of its own instead of the replay (the report's one number for
    that fix: the replay's is not said beside it)."""
    if name in NOT_A_FIX:
        return NOT_A_FIX[name]
    cause = WHATIF_CAUSE.get(name)
    if cause is not None and cause in ctx.acting:
        place, replayed = ctx.acting[cause]
        if not replayed:
            return None
        return say("whatif.other_fix", place=place, cause=cause)
    if cause is not None and cause in ctx.held_back:
        return say("whatif.held_back", cause=cause)
    if cause is not None and cause in ctx.shares:
        return say("whatif.unacted", cause=cause, pct=ctx.shares[cause])
    return say("whatif.uncarried")


def _carried(name: str, pct: float, place: int, ctx: Context) -> str:
    """``no dataloader 6.1% (recommendation 2)``, saying which end of the recommendation's
    range the replay is when the recommendation's own estimate differs from it."""
    est, low, high = ctx.savings.get(place, (pct, None, None))
    if f"{est:.1f}" == f"{pct:.1f}":
        return say("whatif.carried", name=humanize(name), pct=pct, place=place)
    end = "low" if low is not None and f"{low:.1f}" == f"{pct:.1f}" else "high" if high is not None and f"{high:.1f}" == f"{pct:.1f}" else None
    said = say("whatif.range_end", end=end, place=place) if end else say("whatif.builds_on", place=place)
    return say("whatif.carried_said", name=humanize(name), pct=pct, said=said)


def _whatif(v: Any, ctx: Context | None = None) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    ctx = ctx or Context()
    out = []
    measured, replayed = number(v.get("measured_step_us")), number(v.get("replayed_step_us"))
    err = number(v.get("model_error_pct"))
    if measured is not None and replayed is not None:
        got, was = fg.fmt_duration(replayed), fg.fmt_duration(measured)
        if got == was:
            text = say("whatif.replay_same", was=was)
        else:
            text = say("whatif.replay", got=got, was=was)
        out.append(sentence(text, say("whatif.model_error", err=phrases.signed_pct(err))) if err is not None else sentence(text))
    savings = v.get("savings_pct")
    if isinstance(savings, Mapping):
        ranked = sorted(((k, x) for k, x in ((str(k), number(x)) for k, x in savings.items()) if x and x >= 0.5), key=lambda kv: -kv[1])
        carried = [(k, x) for k, x in ranked if k in ctx.carried]
        others = [(k, x) for k, x in ranked if k not in ctx.carried]
        if carried:
            out.append(say("whatif.recommended", fixes=", ".join(_carried(k, x, ctx.carried[k], ctx) for k, x in carried)))
        # A what-if no recommendation carries is named only with the reason (a bound, or
        # why no recommendation acts on it), and only where it saves more than the least
        # recommended one: otherwise it would read as advice.
        floor = min((x for _, x in carried), default=0.0)
        why = {k: _why_not(k, ctx) for k, _ in others}
        shown = [(k, x) for k, x in others if x > floor and why[k] is not None][:3]
        if shown:
            fixes = "; ".join(say("whatif.shown", name=humanize(k), pct=x, why=why[k]) for k, x in shown)
            out.append(say("whatif.not_recommended", fixes=fixes))
        if not ranked and savings:
            out.append(say("whatif.none"))
    return out


def _whatif_tables(v: Any) -> list[Table] | None:
    """One row per what-if (its step and its saving) instead of two parallel tables."""
    if not isinstance(v, Mapping):
        return None
    steps, savings = v.get("step_us"), v.get("savings_pct")
    if not isinstance(steps, Mapping) or not isinstance(savings, Mapping):
        return None
    names = list(dict.fromkeys([*savings, *steps]))
    names.sort(key=lambda k: -(number(savings.get(k)) or 0.0))
    rows = tuple((humanize(str(k)), fmt_value("step_us", steps.get(k)), fmt_value("savings_pct", savings.get(k))) for k in names)
    rest = {k: x for k, x in v.items() if k not in ("step_us", "savings_pct")}
    return tables_of(rest, "whatif") + [
        Table(("what-if", "step", "saves"), rows[:MAX_ROWS], caption="Each what-if replayed on its own")
    ]


def _barriers(v: Any) -> list[str]:
    if not isinstance(v, Mapping) or number(v.get("barriers")) is None:
        return []
    n = int(number(v.get("barriers")) or 0)
    late = [int(r) for r in v.get("waited_for_ranks") or [] if isinstance(r, int) and not isinstance(r, bool)]
    pieces = [say("barriers.count", barriers=phrases.count(n, "barrier"))]
    if late:
        pieces.append(say("barriers.waited", ranks=phrases.ranks(late)))
    return [sentence(*pieces)]


CUSTOM_TABLES = {"whatif": _whatif_tables}


SENTENCES = {
    "whatif": _whatif,
    "barrier_waits": _barriers,
    "collective_bandwidth": _bandwidth,
    "stragglers": _stragglers,
    "straggler_analysis": _arrivals,
    "critical_rank_per_step": _critical,
    "compute_imbalance": _imbalance,
    "pipeline": _pipeline,
}


def job_blocks(job: Any, ctx: Context | None = None) -> list[Block]:
    """Every cross-rank finding as a :class:`Block` (known ones first, in a fixed order);
    ``ctx`` lets the sentences relate a finding to the recommendations."""
    if not isinstance(job, Mapping):
        return []
    order = [k for k in TITLES if k in job] + sorted(str(k) for k in job if k not in TITLES)
    scalars = [(k, job[k]) for k in order if not isinstance(job[k], (Mapping, list)) and k not in SAID_ELSEWHERE]
    out: list[Block] = []
    if scalars:
        out.append(
            Block("summary", "Job", tables=(Table(("", ""), tuple((humanize(k), fmt_value(k, v)) for k, v in scalars)),))
        )
    for key in order:
        value = job[key]
        if not isinstance(value, (Mapping, list)):
            continue
        if ctx is not None and ctx.ranks <= 1 and key in CROSS_RANK:
            continue
        if key == "whatif":
            sentences = tuple(_whatif(value, ctx))
        else:
            sentences = tuple(SENTENCES[key](value)) if key in SENTENCES else ()
        custom = CUSTOM_TABLES[key](value) if key in CUSTOM_TABLES else None
        tables = () if (isinstance(value, list) and not value) else tuple(custom if custom is not None else tables_of(value, key))
        tables = tuple(t if t.caption else Table(t.columns, t.rows, t.note, caption_for(key)) for t in tables)
        if not sentences and not tables:
            continue
        out.append(Block(key, TITLES.get(key, humanize(key).capitalize()), sentences, tables))
    named = [role for role in fg.ROLES if any(_names_role(x, role) for b in out for x in b.sentences)]
    if named:
        # Each rank role the findings name, said once with its meaning: the legend of the
        # text and Markdown reports, and of the HTML's findings.
        out.append(Block("roles", "Rank roles", (say("roles.legend", roles="; ".join(fg.role_legend(r) for r in named)),)))
    return out


def _names_role(sentence: str, role: str) -> bool:
    return f"the {role}" in sentence or f"The {role}" in sentence


def findings_context(report: Report) -> Context:
    """What the cross-rank findings' sentences need from the rest of the report."""
    carried: dict[str, int] = {}
    acting: dict[str, tuple[int, bool]] = {}
    savings: dict[int, tuple[float, float | None, float | None]] = {}
    for i, r in enumerate(report.recommendations, 1):
        if r.whatif and r.whatif not in carried:
            carried[r.whatif] = i
            savings[i] = (r.estimated_savings_pct, r.savings_low_pct, r.savings_high_pct)
        if r.estimated_savings_pct > 0:
            acting.setdefault(r.category.value, (i, r.whatif is not None))
    s = fg.job_shares(report)
    held = report.extra.get("held_back")
    held_causes = frozenset(str(h.get("category")) for h in held if isinstance(h, Mapping)) if isinstance(held, list) else frozenset()
    shares = {c.value: v for c, v in s.lost_pct.items() if v is not None}
    ranks = sum(1 for r in report.ranks if fg.has_data(r))
    return Context(carried=carried, shares=shares, held_back=held_causes, acting=acting, savings=savings, ranks=ranks)
