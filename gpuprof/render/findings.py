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
        text = f"Rank {s['rank']} arrived last at {s.get('last_arrivals', '?')} of {s.get('collectives', '?')} collectives"
        wait = number(s.get("caused_wait_us_per_step"))
        if wait is not None:
            text += f"; the other ranks waited {fg.fmt_duration(wait)} per step for it"
        ratio = number(s.get("phase_ratio"))
        if s.get("phase") and ratio is not None:
            text += f"; its {s['phase']} takes {ratio:.2f}× the others' median"
        out.append(text + ".")
    if isinstance(v, list) and not v:
        out.append("No rank is consistently the last to arrive at collectives.")
    return out


def _arrivals(v: Any) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    out = []
    n = number(v.get("collectives_matched"))
    if n is not None:
        out.append(f"{int(n)} collective calls were matched across ranks.")
    offsets = v.get("clock_offsets_us")
    if isinstance(offsets, Mapping):
        vals = [abs(x) for x in (number(o) for o in offsets.values()) if x is not None]
        if vals and max(vals) > 0:
            out.append(f"Rank clocks differed by up to {fg.fmt_duration(max(vals))}; times were aligned before comparing.")
    arr = v.get("arrivals")
    if isinstance(arr, Mapping) and arr.get("rotating"):
        out.append("The last rank to arrive changes from call to call (no single straggler).")
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
        return [f"Rank {top} was the {fg.PACE_SETTER} in the step profiled."]
    text = f"Rank {top} was the {fg.PACE_SETTER} in {counts[top]} of {len(rows)} steps"
    if len(counts) > 1:
        text += f"; {len(counts)} different ranks were over the run"
    return [text + "."]


def _imbalance(v: Any) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    out = []
    ar = v.get("across_ranks")
    if isinstance(ar, Mapping) and number(ar.get("max_over_median")) is not None:
        busiest, median = phrases.duration_pair(number(ar.get("max_compute_us_per_step")), number(ar.get("median_compute_us_per_step")))
        if busiest == median:
            out.append(f"Every rank computes about the same per step ({median}).")
        else:
            out.append(
                f"The {fg.BUSIEST} rank ({ar.get('max_rank')}) computes {number(ar.get('max_over_median')):.2f}× the median rank "
                f"per step ({busiest} against {median})."
            )
    st = v.get("across_stages")
    others = number(st.get("max_over_others_median")) if isinstance(st, Mapping) else None
    if isinstance(st, Mapping) and others is not None:
        out.append(
            f"The slowest pipeline stage ({st.get('max_stage')}) computes {others:.2f}× the median of the other "
            f"stages per microbatch."
        )
    elif isinstance(st, Mapping) and number(st.get("max_over_median")) is not None:  # a report saved before
        out.append(
            f"The slowest pipeline stage ({st.get('max_stage')}) computes {number(st.get('max_over_median')):.2f}× the "
            f"median stage per microbatch."
        )
    return out


def _pipeline(v: Any) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    parts = []
    if v.get("stages") is not None:
        parts.append(f"{v.get('stages')} stages")
    if v.get("microbatches") is not None:
        parts.append(f"{v.get('microbatches')} microbatches")
    if v.get("schedule"):
        parts.append(f"{v.get('schedule')} schedule")
    text = ", ".join(parts)
    stages = [r for r in v.get("per_stage") or [] if isinstance(r, Mapping) and number(r.get("bubble_fraction")) is not None]
    theory = number(v.get("theoretical_bubble_fraction"))
    if stages:
        worst = max(stages, key=lambda r: float(r["bubble_fraction"]))
        text += f": stages idle in the bubble up to {100 * float(worst['bubble_fraction']):.1f}% of the step (stage {worst.get('stage')})"
        if theory is not None:
            text += f", against {100 * theory:.1f}% in theory for this schedule with free communication"
    return [text + "."] if text else []


def _bandwidth(v: Any) -> list[str]:
    rows = [r for r in v.values() if isinstance(r, Mapping)] if isinstance(v, Mapping) else []
    notes = sorted({str(r["bandwidth_note"]) for r in rows if r.get("bandwidth_note")})
    # Bandwidth of messages under a megabyte says more about latency than about the link.
    big = [r for r in rows if (number(r.get("bytes_per_step")) or 0.0) >= 1e6]
    bus = sorted(x for x in (number(r.get("busbw_gbps")) for r in big) if x)
    if not bus:
        # The notes say why in full ("not measurable: the other members ..."): not twice.
        return [f"Bus bandwidth {n}." if n.startswith("not measurable") else f"Bus bandwidth not measurable: {n}."
                for n in notes[:2]]
    med = bus[len(bus) // 2]
    text = f"Collectives moved data at {med:,.1f} GB/s bus bandwidth (median over {len(bus)} ranks)"
    peaks = [x for x in (number(r.get("peak_gbps")) for r in big) if x]
    if peaks:
        text += f", {100 * med / max(peaks):.1f}% of the {max(peaks):,.0f} GB/s link peak"
    slow = sum(int(number(r.get("slow_calls")) or 0) for r in rows)
    if slow:
        text += f"; {slow} calls ran well below the link's speed"
    exposed = [x for x in (number(r.get("exposed_us_per_step")) for r in rows) if x is not None]
    if exposed:
        text += f"; up to {fg.fmt_duration(max(exposed))} per step of it was exposed (nothing computing beside it)"
    return [text + "."]


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
    "free_host": "every host cost gone at once: the bound of any host-side fix, not one change",
    "free_launch_calls": "only the launch calls free: the low end of a host fix's range",
    "double_bandwidth": "a link twice as fast: hardware, not a change to the job",
    "no_variation": "every op at its type's typical time: the bound of evening out the work",
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
        return f"another fix than recommendation {place}'s, on the same {cause} time"
    if cause is not None and cause in ctx.held_back:
        return f"its {cause} recommendation was held back: the trace lacks what it needs (see the warnings)"
    if cause is not None and cause in ctx.shares:
        return f"no recommendation acts on it: {cause} holds {ctx.shares[cause]:.1f}% of the job's time"
    return "no recommendation carries it"


def _carried(name: str, pct: float, place: int, ctx: Context) -> str:
    """``no dataloader 6.1% (recommendation 2)``, saying which end of the recommendation's
    range the replay is when the recommendation's own estimate differs from it."""
    est, low, high = ctx.savings.get(place, (pct, None, None))
    if f"{est:.1f}" == f"{pct:.1f}":
        return f"{humanize(name)} {pct:.1f}% (recommendation {place})"
    end = "low" if low is not None and f"{low:.1f}" == f"{pct:.1f}" else "high" if high is not None and f"{high:.1f}" == f"{pct:.1f}" else None
    said = f"the {end} end of recommendation {place}'s range" if end else f"recommendation {place} builds its estimate on it"
    return f"{humanize(name)} {pct:.1f}% ({said})"


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
            text = f"Replaying the job's dependencies gives its measured step, {was}"
        else:
            text = f"Replaying the job's dependencies gives a step of {got} against {was} measured"
        out.append(text + (f" (model error {phrases.signed_pct(err)})." if err is not None else "."))
    savings = v.get("savings_pct")
    if isinstance(savings, Mapping):
        ranked = sorted(((k, x) for k, x in ((str(k), number(x)) for k, x in savings.items()) if x and x >= 0.5), key=lambda kv: -kv[1])
        carried = [(k, x) for k, x in ranked if k in ctx.carried]
        others = [(k, x) for k, x in ranked if k not in ctx.carried]
        if carried:
            out.append(
                "Replayed alone, the recommended fixes save: "
                + ", ".join(_carried(k, x, ctx.carried[k], ctx) for k, x in carried)
                + "."
            )
        # A what-if no recommendation carries is named only with the reason (a bound, or
        # why no recommendation acts on it), and only where it saves more than the least
        # recommended one: otherwise it would read as advice.
        floor = min((x for _, x in carried), default=0.0)
        why = {k: _why_not(k, ctx) for k, _ in others}
        shown = [(k, x) for k, x in others if x > floor and why[k] is not None][:3]
        if shown:
            out.append(
                "Replayed but not recommended: "
                + "; ".join(f"{humanize(k)} {x:.1f}% ({why[k]})" for k, x in shown)
                + "."
            )
        if not ranked and savings:
            out.append("No single what-if in the replay saves 0.5% of the step or more.")
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
    text = f"{phrases.count(n, 'barrier')} (ops that start at the same instant on every rank)"
    if late:
        text += f"; the other ranks wait at them for {phrases.ranks(late)}, the last to arrive"
    return [text + "."]


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
        out.append(Block("roles", "Rank roles", ("Rank roles: " + "; ".join(fg.role_legend(r) for r in named) + ".",)))
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
