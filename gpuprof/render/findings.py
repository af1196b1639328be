"""Cross-rank findings (the report's ``job`` key) as sentences and tables, for any medium.

The findings are nested JSON owned by the analysis, and they grow: the known ones get a
sentence that says what they mean; every finding, known or not, becomes tables of plain
values (a mapping of values: a two-column table; a list of records or a mapping of
records: one row per record). Nothing is ever shown as a raw JSON dump. Values are
formatted by the unit their key names (``_us``, ``_pct``, ``_bytes``, ``_gbps``,
``fraction``). Everything here returns plain strings; renderers escape them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuprof.model.report import Report
from gpuprof.model import figures as fg
from gpuprof.util import phrases

MAX_ROWS = 64  # rows per table; the JSON report has them all
MAX_LIST_ITEMS = 6  # items of a list shown inside one cell

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


# Captions of the tables of known findings, by the key the table comes from: what the
# numbers are, in words (an unknown key's caption is the key, humanized).
CAPTIONS: Mapping[str, str] = {
    "stragglers": "Ranks that arrive last at collectives, and what the others wait for them",
    "critical_rank_per_step": "Per step: the rank that waited least, and how long it and the others waited",
    "clock_offsets_us": "Clock offset of each rank, removed before comparing times",
    "arrivals": "Arrival order at collectives",
    "last_counts": "Collectives each rank reached last",
    "early_starters": "Ranks that reach collectives early and wait for the others",
    "incomplete_groups": "Process groups with ranks missing from the input",
    "across_ranks": "Compute per step across ranks",
    "across_stages": "Compute per microbatch across pipeline stages",
    "per_stage": "Per pipeline stage",
    "wait_us_per_step": "Wait at the barriers per step, per rank",
    "last_arrivals": "Barriers each rank reached last",
    "last_activity": "What the last rank to arrive ran just before each barrier",
    "late_comm": "Communication the late ranks run between their last compute and the barrier",
    "slow": "Collective calls well below the link's speed",
    "savings_pct": "What each what-if saves on its own",
    "step_us": "The job's step with each what-if",
    "pipeline": "The schedule's figures",
    "straggler_analysis": "How collectives were matched across ranks",
    "barrier_waits": "Barriers and who waits at them",
    "whatif": "The replay of the unchanged job",
    "collective_bandwidth": "Each rank's collectives: bytes, time and bandwidth",
    "compute_imbalance": "Compute per step and per microbatch",
}
# Job-level figures another part of the report already states (the combined replay's line
# under the recommendations, the what-if sentence): not repeated in the "Job" table.
SAID_ELSEWHERE = frozenset({"combined_savings_pct", "model_error_pct"})
# Keys whose values are positions in a sequence (0 = the first): shown counted from 1, as
# the report's sentences count them ("barriers 1, 2 of 32").
POSITION_KEYS = frozenset({"outlier_barriers"})


def caption_for(key: str) -> str:
    return CAPTIONS.get(key) or humanize(key).capitalize()


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str | None = None  # e.g. rows left out
    caption: str | None = None  # what a nested table is part of


@dataclass(frozen=True)
class Block:
    """One finding: a title, what it means in words, and its values as tables."""

    key: str
    title: str
    sentences: tuple[str, ...] = ()
    tables: tuple[Table, ...] = field(default=())


_UNIT_WORDS = ("us", "pct", "bytes", "gbps", "s", "j")


def humanize(key: str) -> str:
    """``caused_wait_us_per_step`` -> ``caused wait per step`` (the unit goes to the value;
    a leading unit word stays: ``bytes_per_step`` -> ``bytes per step``)."""
    words = str(key).split("_")
    kept = [w for i, w in enumerate(words) if i == 0 or w not in _UNIT_WORDS]
    return " ".join(w for w in kept if w) or str(key)


def _has_unit(key: str) -> bool:
    """Whether a key names its unit, so that its value can be formatted by it."""
    k = str(key)
    return k.endswith(("_us", "_s", "_pct", "_bytes", "_gbps")) or "fraction" in k or "_us_" in k or "_pct_" in k


def _ids(m: Mapping[str, Any]) -> bool:
    """Keys that are identifiers (rank numbers), not names: values take the parent's unit."""
    return all(str(k).lstrip("-").isdigit() for k in m)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def fmt_value(key: str, value: Any) -> str:
    """A value as text, in the unit its key names."""
    if value is None:
        return fg.NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    k = str(key)
    if isinstance(value, str):
        # A what-if is named in words, as everywhere in the prose ("no variation").
        return humanize(value) if k == "whatif" and "_" in value else value
    n = _num(value)
    if n is not None:
        if k.endswith("_us") or "_us_" in k:
            return fg.fmt_duration(n)
        if k.endswith("_s"):
            return f"{n:,.2f} s"
        if k.endswith("_pct") or "_pct_" in k:
            return f"{n:.1f}%"
        if "fraction" in k or k.endswith("_share_of_peak"):
            return f"{100.0 * n:.1f}%"
        if k.endswith("_bytes") or "bytes_" in k:
            return fmt_bytes(n)
        if k.endswith("_gbps"):
            return f"{n:,.1f} GB/s"
        if k.endswith("ratio") or k.endswith("over_median"):
            return f"{n:.2f}×"
        if isinstance(value, int):
            return f"{value:,}"
        return f"{n:,.4g}" if abs(n) < 1e6 else f"{n:,.0f}"
    if isinstance(value, Sequence):
        if k in POSITION_KEYS:
            value = [x + 1 if isinstance(x, int) and not isinstance(x, bool) else x for x in value]
        items = [fmt_value(k, x) for x in list(value)[:MAX_LIST_ITEMS]]
        more = len(value) - MAX_LIST_ITEMS
        return ", ".join(items) + (f" (+{more} more)" if more > 0 else "") if items else "none"
    if isinstance(value, Mapping):
        parts = [f"{humanize(str(a))} {fmt_value(str(a), b)}" for a, b in list(value.items())[:MAX_LIST_ITEMS]]
        more = len(value) - MAX_LIST_ITEMS
        return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
    return str(value)


def _is_record(v: Any) -> bool:
    return isinstance(v, Mapping) and bool(v)


def _records_table(records: Sequence[tuple[str | None, Mapping[str, Any]]], first: str | None) -> Table:
    """Rows of records; columns are the union of their keys, in first-seen order."""
    cols: list[str] = []
    for _, rec in records:
        for k in rec:
            if k not in cols:
                cols.append(str(k))
    rows = []
    for label, rec in records[:MAX_ROWS]:
        cells = [fmt_value(c, rec.get(c)) if c in rec else "" for c in cols]
        rows.append(tuple(([label or ""] if first else []) + cells))
    note = f"{len(records) - MAX_ROWS} more rows in the JSON report" if len(records) > MAX_ROWS else None
    head = ([first] if first else []) + [humanize(c) for c in cols]
    return Table(tuple(head), tuple(rows), note)


def tables_of(value: Any, name: str = "", depth: int = 0) -> list[Table]:
    """Any JSON value as tables of plain values (nested records become their own tables)."""
    if isinstance(value, Mapping):
        if value and all(_is_record(v) for v in value.values()):
            first = "rank" if _ids(value) else " "
            return [_records_table([(humanize(str(k)), v) for k, v in value.items()], first)]
        flat = [(k, v) for k, v in value.items() if not _is_record(v) and not _is_record_list(v)]
        nested = [(k, v) for k, v in value.items() if _is_record(v) or _is_record_list(v)]
        out: list[Table] = []
        if flat and name and _has_unit(name) and not any(_has_unit(str(k)) for k, _ in flat) and not _ids(value):
            # {"no_dataloader": 0.11} under savings_pct: named rows in the parent's unit.
            out.append(Table(("", humanize(name)), tuple((humanize(str(k)), fmt_value(name, v)) for k, v in flat)))
        elif flat and value and _ids(value) and name:
            # {"0": 1.5, "1": 2.0} under clock_offsets_us: one row per rank, in the parent's unit.
            rows = tuple((str(k), fmt_value(name, v)) for k, v in flat[:MAX_ROWS])
            more = f"{len(flat) - MAX_ROWS} more rows in the JSON report" if len(flat) > MAX_ROWS else None
            out.append(Table(("rank", humanize(name)), rows, more))
        elif flat:
            out.append(Table(("", ""), tuple((humanize(str(k)), fmt_value(str(k), v)) for k, v in flat)))
        for k, v in nested:
            if depth >= 3:
                out.append(Table(("", ""), ((humanize(str(k)), fmt_value(str(k), v)),)))
                continue
            for t in tables_of(v, str(k), depth + 1):
                out.append(t if t.caption else Table(t.columns, t.rows, t.note, caption_for(str(k))))
        return out
    if _is_record_list(value):
        return [_records_table([(None, v) for v in value], None)]
    return [Table(("", ""), ((humanize(name) or "value", fmt_value(name, value)),))]


def _is_record_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_is_record(x) for x in v)


# --- sentences for the findings the analysis writes today --------------------------------


def _stragglers(v: Any) -> list[str]:
    out = []
    for s in v if isinstance(v, list) else []:
        if not isinstance(s, Mapping) or _num(s.get("rank")) is None:
            continue
        text = f"Rank {s['rank']} arrived last at {s.get('last_arrivals', '?')} of {s.get('collectives', '?')} collectives"
        wait = _num(s.get("caused_wait_us_per_step"))
        if wait is not None:
            text += f"; the other ranks waited {fg.fmt_duration(wait)} per step for it"
        ratio = _num(s.get("phase_ratio"))
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
    n = _num(v.get("collectives_matched"))
    if n is not None:
        out.append(f"{int(n)} collective calls were matched across ranks.")
    offsets = v.get("clock_offsets_us")
    if isinstance(offsets, Mapping):
        vals = [abs(x) for x in (_num(o) for o in offsets.values()) if x is not None]
        if vals and max(vals) > 0:
            out.append(f"Rank clocks differed by up to {fg.fmt_duration(max(vals))}; times were aligned before comparing.")
    arr = v.get("arrivals")
    if isinstance(arr, Mapping) and arr.get("rotating"):
        out.append("The last rank to arrive changes from call to call (no single straggler).")
    return out


def _critical(v: Any) -> list[str]:
    rows = [r for r in v if isinstance(r, Mapping) and _num(r.get("rank")) is not None] if isinstance(v, list) else []
    if not rows:
        return []
    counts: dict[int, int] = {}
    for r in rows:
        counts[int(r["rank"])] = counts.get(int(r["rank"]), 0) + 1
    top = max(counts, key=lambda k: (counts[k], -k))
    if len(rows) == 1:
        return [f"Rank {top} set the pace (waited least) in the step profiled."]
    text = f"Rank {top} set the pace (waited least) in {counts[top]} of {len(rows)} steps"
    if len(counts) > 1:
        text += f"; {len(counts)} different ranks did over the run"
    return [text + "."]


def _imbalance(v: Any) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    out = []
    ar = v.get("across_ranks")
    if isinstance(ar, Mapping) and _num(ar.get("max_over_median")) is not None:
        busiest, median = phrases.duration_pair(_num(ar.get("max_compute_us_per_step")), _num(ar.get("median_compute_us_per_step")))
        if busiest == median:
            out.append(f"Every rank computes about the same per step ({median}).")
        else:
            out.append(
                f"The busiest rank ({ar.get('max_rank')}) computes {_num(ar.get('max_over_median')):.2f}× the median rank "
                f"per step ({busiest} against {median})."
            )
    st = v.get("across_stages")
    if isinstance(st, Mapping) and _num(st.get("max_over_median")) is not None:
        out.append(
            f"The slowest pipeline stage ({st.get('max_stage')}) computes {_num(st.get('max_over_median')):.2f}× the "
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
    stages = [r for r in v.get("per_stage") or [] if isinstance(r, Mapping) and _num(r.get("bubble_fraction")) is not None]
    theory = _num(v.get("theoretical_bubble_fraction"))
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
    big = [r for r in rows if (_num(r.get("bytes_per_step")) or 0.0) >= 1e6]
    bus = sorted(x for x in (_num(r.get("busbw_gbps")) for r in big) if x)
    if not bus:
        # The notes say why in full ("not measurable: the other members ..."): not twice.
        return [f"Bus bandwidth {n}." if n.startswith("not measurable") else f"Bus bandwidth not measurable: {n}."
                for n in notes[:2]]
    med = bus[len(bus) // 2]
    text = f"Collectives moved data at {med:,.1f} GB/s bus bandwidth (median over {len(bus)} ranks)"
    peaks = [x for x in (_num(r.get("peak_gbps")) for r in big) if x]
    if peaks:
        text += f", {100 * med / max(peaks):.1f}% of the {max(peaks):,.0f} GB/s link peak"
    slow = sum(int(_num(r.get("slow_calls")) or 0) for r in rows)
    if slow:
        text += f"; {slow} calls ran well below the link's speed"
    exposed = [x for x in (_num(r.get("exposed_us_per_step")) for r in rows) if x is not None]
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
    job's time (%), and the causes whose recommendation was held back."""

    carried: Mapping[str, int] = field(default_factory=dict)
    shares: Mapping[str, float] = field(default_factory=dict)
    held_back: frozenset[str] = frozenset()


def _why_not(name: str, ctx: Context) -> str:
    if name in NOT_A_FIX:
        return NOT_A_FIX[name]
    cause = WHATIF_CAUSE.get(name)
    if cause is not None and cause in ctx.held_back:
        return f"its {cause} recommendation was held back: the trace lacks what it needs (see the warnings)"
    if cause is not None and cause in ctx.shares:
        return f"no recommendation acts on it: {cause} holds {ctx.shares[cause]:.1f}% of the job's time"
    return "no recommendation carries it"


def _whatif(v: Any, ctx: Context | None = None) -> list[str]:
    if not isinstance(v, Mapping):
        return []
    ctx = ctx or Context()
    out = []
    measured, replayed = _num(v.get("measured_step_us")), _num(v.get("replayed_step_us"))
    err = _num(v.get("model_error_pct"))
    if measured is not None and replayed is not None:
        got, was = fg.fmt_duration(replayed), fg.fmt_duration(measured)
        if got == was:
            text = f"Replaying the job's dependencies gives its measured step, {was}"
        else:
            text = f"Replaying the job's dependencies gives a step of {got} against {was} measured"
        out.append(text + (f" (model error {phrases.signed_pct(err)})." if err is not None else "."))
    savings = v.get("savings_pct")
    if isinstance(savings, Mapping):
        ranked = sorted(((k, x) for k, x in ((str(k), _num(x)) for k, x in savings.items()) if x and x >= 0.5), key=lambda kv: -kv[1])
        carried = [(k, x) for k, x in ranked if k in ctx.carried]
        others = [(k, x) for k, x in ranked if k not in ctx.carried]
        if carried:
            out.append(
                "Replayed alone, the recommended fixes save: "
                + ", ".join(f"{humanize(k)} {x:.1f}% (recommendation {ctx.carried[k]})" for k, x in carried)
                + "."
            )
        # A what-if no recommendation carries is named only with the reason (a bound, or
        # why no recommendation acts on it), and only where it saves more than the least
        # recommended one: otherwise it would read as advice.
        floor = min((x for _, x in carried), default=0.0)
        shown = [(k, x) for k, x in others if x > floor][:3]
        if shown:
            out.append(
                "Replayed but not recommended: "
                + "; ".join(f"{humanize(k)} {x:.1f}% ({_why_not(k, ctx)})" for k, x in shown)
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
    names.sort(key=lambda k: -(_num(savings.get(k)) or 0.0))
    rows = tuple((humanize(str(k)), fmt_value("step_us", steps.get(k)), fmt_value("savings_pct", savings.get(k))) for k in names)
    rest = {k: x for k, x in v.items() if k not in ("step_us", "savings_pct")}
    return tables_of(rest, "whatif") + [
        Table(("what-if", "step", "saves"), rows[:MAX_ROWS], caption="Each what-if replayed on its own")
    ]


def _barriers(v: Any) -> list[str]:
    if not isinstance(v, Mapping) or _num(v.get("barriers")) is None:
        return []
    n = int(_num(v.get("barriers")) or 0)
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
    return out


def findings_context(report: Report) -> Context:
    """What the cross-rank findings' sentences need from the rest of the report."""
    carried: dict[str, int] = {}
    for i, r in enumerate(report.recommendations, 1):
        if r.whatif and r.whatif not in carried:
            carried[r.whatif] = i
    s = fg.job_shares(report)
    held = report.extra.get("held_back")
    held_causes = frozenset(str(h.get("category")) for h in held if isinstance(h, Mapping)) if isinstance(held, list) else frozenset()
    shares = {c.value: v for c, v in s.lost_pct.items() if v is not None}
    return Context(carried=carried, shares=shares, held_back=held_causes)
