"""Any JSON value of a report as tables of plain values, for any medium.

The report's cross-rank findings (its ``job`` key) are nested JSON owned by the analysis,
and they grow: every finding, known or not, becomes tables of plain values (a mapping of
values: a two-column table; a list of records or a mapping of records: one row per
record). Nothing is ever shown as a raw JSON dump. Values are formatted by the unit their
key names (``_us``, ``_pct``, ``_bytes``, ``_gbps``, ``fraction``). Everything here
returns plain strings; renderers escape them. What the known findings mean, in
sentences, is :mod:`gpuprof.render.findings`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprof.render import figures as fg
from gpuprof.render.figures import number

MAX_ROWS = 64  # rows per table; the JSON report has them all
MAX_LIST_ITEMS = 6  # items of a list shown inside one cell

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
    n = number(value)
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
