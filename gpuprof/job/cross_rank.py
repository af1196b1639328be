"""Job-level analysis across ranks: from compact per-rank summaries to claims and findings.

Steps, each in its own module:

1. :mod:`gpuprof.job.collectives` matches every collective across ranks, aligns the
   ranks' clocks on them, and measures how long each rank waited in each one for the last
   member: those waits are claimed as ``straggler`` on the waiting rank's own clock. In
   op-level timelines it also finds barriers before timer ops and claims the waits there.
2. :mod:`gpuprof.job.pipeline_parallel` finds pipeline stages and claims the time a
   stage waits for a neighbour as ``pipeline_bubble``.
3. Here: naming the stragglers (the ranks others wait for) and the phase that makes them
   slow, the critical rank of each step, and the compute imbalance across ranks and stages.

Findings (all JSON-serializable), keys of :attr:`CrossRankResult.findings`:

``per_rank``           ``{rank: {...}}`` merged into each rank's JSON row: ``straggler_wait_us``
                       (waiting in collectives with no compute beside it; before precedence),
                       ``straggler_wait_us_per_step``, ``hidden_wait_us`` (waiting that compute
                       on another stream hid), ``is_straggler``, ``clock_offset_us``,
                       ``collectives`` (matched), ``last_arrivals`` (arrived last among those present),
                       and for pipeline stages ``stage``, ``bubble_fraction``.
``stragglers``         list of ``{rank, caused_wait_us_per_step, last_arrivals, collectives,
                       phase, phase_ratio, phase_excess_us_per_step, late_start_us,
                       gain_us_per_step, gains_us}``: ``gain_us_per_step`` is what the job's
                       critical path loses to that rank per step, the sum over the collectives
                       it arrives last at of its arrival minus the next-latest member's
                       (``gains_us`` lists them, largest first); a
                       straggler is a rank that arrives last at collectives and whose lateness
                       accounts for a fair share of everyone else's waiting.
``straggler_analysis`` how the waits were measured: collectives matched, clock offsets,
                       incomplete groups and why no straggler could be named;
                       ``world_size`` and ``world_size_note`` when the world size was
                       inferred from the collectives; ``arrivals``:
                       how lateness is spread over the complete collectives (``collectives``,
                       ``last_counts`` {rank: times last}, ``rotating``: no rank is last at
                       most of them, ``gain_us_per_step``: sum over collectives of the last
                       arrival minus the next-latest, per step), and ``early_starters``:
                       ranks that begin the step well before the others and wait for them
                       (``{rank, lead_us, lead_over_last_us, wait_us_per_step}``: lead over the
                       median rank and over the last rank to start); ``stragglers_gain_us_per_step``:
                       the critical-path gain per step if all named stragglers arrived with
                       the latest other member.
``critical_rank_per_step`` list of ``{step, rank, waited_us}``: the rank that waited least
                       (in collectives and pipeline bubbles) in that step, i.e. set the pace.
``compute_imbalance``  ``{across_ranks: {...}, across_stages: {...}}``: max over median of
                       compute per step (per microbatch for stages) and who is the max.
``barrier_waits``      op-level timelines only: waits at barriers (ops that start at the same
                       instant on every worker): ``barriers``, ``wait_us_per_step`` (measured,
                       before precedence), ``last_arrivals``, ``waited_for_ranks``,
                       ``last_activity`` (what the last arriver did just before, counted),
                       ``late_comm``: per op name, what the waited-for ranks communicate
                       between their last compute and the barriers (``name``, ``calls``,
                       ``median_us``, ``outliers`` (> 5x the median), ``outlier_us``,
                       ``outlier_barriers``, ``total_us``, ``only_late_ranks``: the
                       waiting ranks run no such op there, ``waiting_median_us``).
``pipeline``           see :func:`gpuprof.job.pipeline_parallel.analyze_pipeline`.
``collective_bandwidth`` ``{rank: {...}}`` for ranks whose collectives have known sizes:
                       achieved bus bandwidth against the link peak, see
                       :func:`gpuprof.job.linkspeed.rank_bandwidth`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuprof.accounting.phases import PHASES
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.assemble import build_job_model
from gpuprof.job.collectives import (
    BarrierWaits,
    MatchedCollectives,
    barrier_waits,
    comm_before_barriers,
    inferred_world_note,
    match_collectives,
    own_pipeline_claims,
    rank_totals,
    wait_claims,
)
from gpuprof.job.linkspeed import job_bandwidth
from gpuprof.job.pipeline_parallel import PipelineResult, analyze_pipeline
from gpuprof.job.whatifs import WhatIfResults, run_whatifs
from gpuprof.model import grouping
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.report import Cause
from gpuprof.model.table import Table, one_of

# A rank is named a straggler when it caused at least this share of all the waiting
# measured in complete groups ...
STRAGGLER_SHARE = 0.2
# ... and the waiting it caused is at least this share of the median step time: below
# that, arrival jitter is normal and naming a rank would be noise.
STRAGGLER_MIN_STEP_SHARE = 0.01
# A phase is named as the reason only when its excess over the other ranks' median
# explains at least this share of the waiting the straggler causes per step.
PHASE_MIN_SHARE = 0.25
# Lateness "rotates" when no rank is last at more than this share of the complete
# collectives and at least ROTATING_MIN_RANKS ranks take turns: data-dependent imbalance,
# not one slow rank.
ROTATING_MAX_SHARE = 0.4
ROTATING_MIN_RANKS = 3
# A rank "starts early" when it begins the step at least this share of the largest such
# lead before the median rank (and by at least STRAGGLER_MIN_STEP_SHARE of the step).
EARLY_LEAD_SHARE = 0.5


@dataclass(frozen=True)
class CrossRankResult:
    """``claims[rank][cause]``: intervals (on that rank's own clock) claimed by job-level
    rules; ``findings``: JSON-serializable job-level facts for the report and the advice."""

    claims: Mapping[int, Mapping[Cause, Intervals]] = field(default_factory=dict)
    findings: Mapping[str, Any] = field(default_factory=dict)
    # The job model replayed with each cause removed (None: nothing could be replayed).
    whatifs: WhatIfResults | None = None


def _steps(s: RankSummary) -> int:
    return max(len(s.steps), 1)


def _median_step_us(summaries: Sequence[RankSummary]) -> float:
    return float(np.median([s.window_us / _steps(s) for s in summaries])) if summaries else 0.0


def _complete_calls(matched: MatchedCollectives) -> tuple[Table, np.ndarray]:
    """The calls of complete collectives with two or more members present, and their
    row indices in ``matched.calls_table``."""
    t = matched.calls_table
    rows = np.flatnonzero(np.asarray(t["complete"]) & (np.asarray(t["n_present"]) >= 2))
    return t.take(rows), rows


def _caused_waits(matched: MatchedCollectives) -> dict[int, tuple[float, int]]:
    """Per rank: waiting it caused in complete groups (sum over the collectives it arrived
    last at, of the median wait of the other members) and how many such collectives."""
    if matched.n_calls == 0:
        return {}
    full, _ = _complete_calls(matched)
    if len(full) == 0:
        return {}
    key = np.asarray(full["key"])
    last = np.asarray(full["is_last"], dtype=bool)
    # Only exposed waiting costs time: a wait that compute on another stream hides is free.
    n_keys = int(key.max()) + 1
    others = ~last
    med = grouping.median(key[others], np.asarray(full["exposed_wait_us"])[others], n_keys)
    # The first member (in table order) of those that arrived last at each collective.
    lkeys, first = np.unique(key[last], return_index=True)
    at = np.flatnonzero(last)[first]
    order = np.argsort(at, kind="stable")  # summed in table order
    caused = np.nan_to_num(med[lkeys[order]], nan=0.0)
    ranks = np.asarray(full["rank"])[at[order]]
    out: dict[int, tuple[float, int]] = {}
    for r in np.unique(ranks).tolist():
        mine = ranks == r
        out[int(r)] = (math.fsum(caused[mine].tolist()), int(mine.sum()))
    return out


def _net_exposed_waits(matched: MatchedCollectives, bubbles: Mapping[int, Intervals]) -> np.ndarray:
    """Per call, its exposed wait less the part a pipeline-bubble claim covers: a stage
    waiting in a collective for the pipeline to drain is structural (bubble, which takes
    precedence in the attribution), not a late rank's doing."""
    calls = matched.calls_table
    if matched.n_calls == 0:
        return np.empty(0)
    out = np.array(calls["exposed_wait_us"], dtype=np.float64)
    if not bubbles:
        return out
    ranks = np.asarray(calls["rank"])
    start = np.asarray(calls["ready_us"], dtype=np.float64)
    wait = np.asarray(calls["wait_us"], dtype=np.float64)
    for rank, claim in bubbles.items():
        idx = np.flatnonzero(ranks == rank)
        if idx.size == 0 or claim[0].size == 0:
            continue
        covered = iv.overlap_with_each((start[idx], start[idx] + wait[idx]), claim)
        out[idx] = np.maximum(out[idx] - covered, 0.0)
    return out


@dataclass(frozen=True)
class _Arrivals:
    """The complete collectives' calls sorted by (key, arrival): ``key``, ``rank``,
    ``arrival_us``, ``exposed_us`` (net of pipeline bubbles), and ``last`` (the index of
    each collective's last row, in key order)."""

    key: np.ndarray
    rank: np.ndarray
    arrival_us: np.ndarray
    exposed_us: np.ndarray
    last: np.ndarray


def _arrivals(matched: MatchedCollectives, bubbles: Mapping[int, Intervals]) -> _Arrivals:
    if matched.n_calls == 0:
        e = np.empty(0)
        return _Arrivals(e.astype(np.int64), e.astype(np.int64), e, e, e.astype(np.int64))
    full, rows = _complete_calls(matched)
    exposed = _net_exposed_waits(matched, bubbles)[rows]
    key = np.asarray(full["key"])
    arrival = np.asarray(full["arrival_us"], dtype=np.float64)
    order = np.lexsort((arrival, key))
    key = key[order]
    new = grouping.runs((key,), key.size)
    last = np.flatnonzero(np.concatenate((new[1:], [True]))) if key.size else np.empty(0, dtype=np.int64)
    return _Arrivals(key, np.asarray(full["rank"])[order], arrival[order], exposed[order], last)


def _critical_gains(matched: MatchedCollectives, bubbles: Mapping[int, Intervals]) -> tuple[np.ndarray, np.ndarray]:
    """Per complete collective, in key order: the rank that arrived last, and ``gain_us``
    (how much sooner the collective could end if that rank had arrived with the
    next-latest member: the next-latest member's exposed wait, which is at most the gap
    between the two arrivals; the rest of the spread of arrivals is not the last rank's
    doing, and a wait that compute hides costs nothing)."""
    a = _arrivals(matched, bubbles)
    if a.last.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    li = a.last
    # Every complete collective has two or more rows: the one before the last is its own.
    prev = li - 1
    gap = np.clip(a.arrival_us[li] - a.arrival_us[prev], 0.0, None)
    gain = np.nan_to_num(np.minimum(gap, a.exposed_us[prev]))
    return a.rank[li], gain


def _group_gain_us(
    matched: MatchedCollectives, bubbles: Mapping[int, Intervals], group: Sequence[int]
) -> float:
    """Total critical-path gain if every rank of ``group`` arrived with the latest member
    outside it: for each complete collective that a group rank arrives last at, the exposed
    wait of the latest outside member (at most the gap between the two arrivals). For one
    rank this is the sum of its :func:`_critical_gains`; for several late at the same
    collective it is more than the sum of their margins over each other."""
    a = _arrivals(matched, bubbles)
    if a.last.size == 0:
        return 0.0
    inside = one_of(a.rank, [int(r) for r in group])
    out_rows = np.flatnonzero(~inside)
    if out_rows.size == 0:
        return 0.0
    # The latest outside member of each collective: the last outside row of its key.
    ok = a.key[out_rows]
    latest_out = out_rows[np.flatnonzero(np.concatenate((ok[1:] != ok[:-1], [True])))]
    li = a.last[inside[a.last]]
    if li.size == 0:
        return 0.0
    pos = np.searchsorted(a.key[latest_out], a.key[li])
    pos_c = np.minimum(pos, latest_out.size - 1)
    hit = a.key[latest_out][pos_c] == a.key[li]
    li, lo = li[hit], latest_out[pos_c[hit]]
    if li.size == 0:
        return 0.0
    gap = np.clip(a.arrival_us[li] - a.arrival_us[lo], 0.0, None)
    return float(np.minimum(gap, a.exposed_us[lo]).sum())


def _early_starters(
    summaries: Sequence[RankSummary], matched: MatchedCollectives, floor_us: float
) -> list[dict[str, Any]]:
    """Ranks that begin their steps well before the median rank and wait for the others:
    the spread of arrivals at the first collective is their early start, not someone's
    lateness."""
    starts = {
        s.rank: float(np.median([st.start_us for st in s.steps])) - matched.offsets_us.get(s.rank, 0.0)
        for s in summaries
        if s.steps
    }
    if len(starts) < 3:
        return []
    med = float(np.median(list(starts.values())))
    lead = {r: med - t for r, t in starts.items()}
    top = max(lead.values())
    if top <= max(floor_us, 0.0):
        return []
    exposed = rank_totals(matched)["exposed_wait_us"]
    out = []
    for r in sorted(lead, key=lambda x: -lead[x]):
        if lead[r] < EARLY_LEAD_SHARE * top or lead[r] < floor_us:
            continue
        s = next(x for x in summaries if x.rank == r)
        wait = float(exposed.get(r, 0.0))
        if wait / _steps(s) < EARLY_LEAD_SHARE * lead[r]:
            continue  # it spends its lead working, not waiting
        out.append(
            {
                "rank": r,
                "lead_us": round(lead[r], 3),
                "lead_over_last_us": round(max(starts.values()) - starts[r], 3),
                "wait_us_per_step": round(wait / _steps(s), 3),
            }
        )
    return out


def _phase_of(s: RankSummary, others: Sequence[RankSummary]) -> tuple[str | None, float | None, float | None]:
    """The phase where ``s`` spends most more time per step than the median of ``others``."""
    best: tuple[str | None, float | None, float | None] = (None, None, None)
    best_excess = 0.0
    for p in PHASES:
        mine = s.phases_us.get(p)
        ref = [float(o.phases_us[p]) for o in others if p in o.phases_us]
        if mine is None or not ref:
            continue
        med = float(np.median(ref))
        excess = float(mine) - med
        if excess > best_excess:
            best_excess = excess
            best = (p, (float(mine) / med) if med > 0 else None, excess)
    return best


def _late_start_us(
    s: RankSummary, summaries: Sequence[RankSummary], offsets: Mapping[int, float]
) -> float | None:
    """How much later than the median rank ``s`` began its first step (aligned clocks)."""
    starts = [x.window[0] - offsets.get(x.rank, 0.0) for x in summaries if x.steps]
    if not s.steps or len(starts) < 2:
        return None
    return float(s.window[0] - offsets.get(s.rank, 0.0) - float(np.median(starts)))


def _value_counts(values: np.ndarray) -> dict[int, int]:
    """How often each value occurs, most often first, ties in order of first appearance
    (as pandas' ``value_counts`` orders them)."""
    uniq, first, counts = np.unique(values, return_index=True, return_counts=True)
    order = np.lexsort((first, -counts))
    return {int(uniq[i]): int(counts[i]) for i in order.tolist()}


def _stragglers(
    summaries: Sequence[RankSummary],
    matched: MatchedCollectives,
    bubbles: Mapping[int, Intervals] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    info: dict[str, Any] = {
        "clock_offsets_us": {str(r): round(o, 3) for r, o in matched.offsets_us.items()},
        "unmatched_calls": matched.unmatched,
    }
    if len(summaries) >= 2:  # one rank's calls are matched with nobody's
        info["collectives_matched"] = int(np.unique(matched.calls_table["key"]).size) if matched.n_calls else 0
    world = max((s.world_size or 0) for s in summaries) if summaries else 0
    if len(summaries) < 2:
        # A single-GPU job (no collectives, no world size) has nobody to wait for.
        if world > 1 or matched.n_calls:
            info["note"] = (
                f"only {len(summaries)} of {world or 'an unknown number of'} ranks in the input: "
                "waiting for other ranks cannot be measured"
            )
            info["ranks_present"] = len(summaries)
            info["world_size"] = world or None
        return [], info
    if matched.world_size_inferred is not None:
        info["world_size"] = matched.world_size_inferred
        info["world_size_note"] = inferred_world_note(matched.world_size_inferred)
    if matched.incomplete_groups:
        info["incomplete_groups"] = {
            pg or "(unnamed)": {"present": a, "expected": b}
            for pg, a, b in ((pg, a, b) for pg, (a, b) in matched.incomplete_groups.items())
        }
        info["note"] = (
            "some process groups are only partly in the input: waits measured among the ranks "
            "present are lower bounds, and the slowest member may be one of the absent ranks, "
            "so no straggler is named for those groups"
        )
    caused = _caused_waits(matched)
    total = sum(c for c, _ in caused.values())
    steps = float(np.median([_steps(s) for s in summaries]))
    floor = STRAGGLER_MIN_STEP_SHARE * _median_step_us(summaries) * steps
    by_rank = {s.rank: s for s in summaries}
    complete_calls = rank_totals(matched)["complete_calls"]
    out: list[dict[str, Any]] = []
    names = [r for r, (c, _) in caused.items() if total > 0 and c >= STRAGGLER_SHARE * total and c >= floor]
    gain_rank, gain_us = _critical_gains(matched, bubbles or {})
    if gain_rank.size:
        counts = _value_counts(gain_rank)
        rotating = bool(
            len(counts) >= ROTATING_MIN_RANKS
            and next(iter(counts.values())) <= ROTATING_MAX_SHARE * gain_rank.size
            and float(np.sum(gain_us)) >= floor
        )
        info["arrivals"] = {
            "collectives": int(gain_rank.size),
            "last_counts": {str(r): int(n) for r, n in counts.items()},
            "rotating": rotating,
            "gain_us_per_step": round(float(np.sum(gain_us)) / steps, 3),
        }
        if rotating:
            # Every rank takes its turn at being last: no one rank to fix.
            names = []
    if names:
        info["stragglers_gain_us_per_step"] = round(_group_gain_us(matched, bubbles or {}, names) / steps, 3)
    early = _early_starters(summaries, matched, floor / max(steps, 1.0))
    if early:
        info["early_starters"] = early
    for rank in sorted(names, key=lambda r: -caused[r][0]):
        s = by_rank[rank]
        others = [x for x in summaries if x.rank not in names]
        phase, ratio, excess = _phase_of(s, others)
        if excess is not None and excess < PHASE_MIN_SHARE * caused[rank][0] / _steps(s):
            # A phase a little slower than the others does not explain the wait it causes.
            phase, ratio, excess = None, None, None
        late = _late_start_us(s, summaries, matched.offsets_us)
        mine = gain_us[gain_rank == rank]
        out.append(
            {
                "rank": rank,
                "caused_wait_us_per_step": round(caused[rank][0] / _steps(s), 3),
                "last_arrivals": caused[rank][1],
                "collectives": int(complete_calls.get(rank, 0)),
                "phase": phase,
                "phase_ratio": None if ratio is None else round(ratio, 3),
                "phase_excess_us_per_step": None if excess is None else round(excess, 3),
                "late_start_us": None if late is None else round(late, 3),
                "gain_us_per_step": round(float(np.sum(mine)) / _steps(s), 3),
                "gains_us": [round(float(g), 3) for g in sorted(mine.tolist(), reverse=True)],
            }
        )
    return out, info


def _per_step_lost(s: RankSummary, claim: Intervals) -> dict[int, float]:
    if not s.steps:
        return {-1: iv.total(claim)}
    st = np.array([x.start_us for x in s.steps])
    en = np.array([x.end_us for x in s.steps])
    got = iv.overlap_with_each((st, en), claim)
    return {x.number: float(g) for x, g in zip(s.steps, got)}


def _critical(summaries: Sequence[RankSummary], waited: Mapping[int, Intervals]) -> list[dict[str, Any]]:
    table: dict[int, dict[int, float]] = {}
    for s in summaries:
        for step, us in _per_step_lost(s, waited.get(s.rank, iv.empty())).items():
            table.setdefault(step, {})[s.rank] = us
    out = []
    for step in sorted(table):
        row = table[step]
        if len(row) < 2:
            continue
        rank = min(row, key=lambda r: (row[r], r))
        out.append(
            {
                "step": step,
                "rank": rank,
                "waited_us": round(row[rank], 3),
                "others_median_waited_us": round(
                    float(np.median([v for r, v in row.items() if r != rank])), 3
                ),
            }
        )
    return out


def _imbalance(summaries: Sequence[RankSummary], pipe: PipelineResult | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    per = {s.rank: iv.total(s.compute) / _steps(s) for s in summaries if s.window_us > 0}
    if len(per) >= 2:
        med = float(np.median(list(per.values())))
        top = max(per, key=lambda r: per[r])
        out["across_ranks"] = {
            "max_over_median": round(per[top] / med, 4) if med > 0 else None,
            "max_rank": top,
            "max_compute_us_per_step": round(per[top], 3),
            "median_compute_us_per_step": round(med, 3),
        }
    if pipe is not None:
        rows = [r for r in pipe.findings.get("per_stage", []) if "compute_per_microbatch_us" in r]
        if len(rows) >= 2:
            vals = [float(r["compute_per_microbatch_us"]) for r in rows]
            med = float(np.median(vals))
            top = rows[int(np.argmax(vals))]
            out["across_stages"] = {
                "max_over_median": round(max(vals) / med, 4) if med > 0 else None,
                "max_stage": top["stage"],
                "max_compute_per_microbatch_us": round(max(vals), 3),
                "median_compute_per_microbatch_us": round(med, 3),
            }
    return out


# A call is an outlier when it takes this many times the median of its name.
OUTLIER_FACTOR = 5.0


def _late_comm(
    b: BarrierWaits,
    summaries: Sequence[RankSummary],
    offsets: Mapping[int, float],
    late: Sequence[int],
) -> list[dict[str, Any]]:
    """What the ranks everyone waits for communicate between their last compute and the
    barriers, per op name, against the same ops on the waiting ranks."""
    by_rank = {s.rank: s for s in summaries}
    mine: dict[str, list[tuple[int, float]]] = {}
    theirs: dict[str, list[float]] = {}
    for r, s in by_rank.items():
        for j, name, dur in comm_before_barriers(s, b.points_us, offsets.get(r, 0.0)):
            if r in late:
                mine.setdefault(name, []).append((j, dur))
            else:
                theirs.setdefault(name, []).append(dur)
    out: list[dict[str, Any]] = []
    for name, rows in mine.items():
        durs = np.array([d for _, d in rows])
        med = float(np.median(durs))
        odd = durs > OUTLIER_FACTOR * max(med, 1.0)
        other = theirs.get(name)
        out.append(
            {
                "name": name,
                "calls": int(durs.size),
                "median_us": round(med, 3),
                "outliers": int(odd.sum()),
                "outlier_us": [round(float(durs[odd].min()), 3), round(float(durs[odd].max()), 3)]
                if odd.any()
                else None,
                "outlier_barriers": sorted({rows[i][0] for i in np.flatnonzero(odd)}),
                "total_us": round(float(durs.sum()), 3),
                "only_late_ranks": other is None,
                "waiting_median_us": None if other is None else round(float(np.median(other)), 3),
            }
        )
    out.sort(key=lambda x: -float(x["total_us"]))
    return out


def _barrier_findings(
    b: BarrierWaits, summaries: Sequence[RankSummary], offsets: Mapping[int, float] | None = None
) -> dict[str, Any]:
    steps = {s.rank: _steps(s) for s in summaries}
    per_step = {r: w / steps.get(r, 1) for r, w in b.wait_us.items()}
    top = max(per_step.values(), default=0.0)
    # The ranks the others wait for: they themselves (almost) never wait.
    waited_for = sorted(r for r, w in per_step.items() if w <= 0.1 * top) if top > 0 else []
    out: dict[str, Any] = {
        "barriers": b.points,
        "wait_us_per_step": {str(r): round(w, 3) for r, w in sorted(per_step.items())},
        "last_arrivals": {str(r): n for r, n in sorted(b.last.items())},
        "waited_for_ranks": waited_for,
        "last_activity": dict(sorted(b.last_activity.items(), key=lambda kv: -kv[1])),
    }
    if waited_for and b.points_us:
        out["late_comm"] = _late_comm(b, summaries, offsets or {}, waited_for)
    return out


def analyze_job(summaries: Sequence[RankSummary]) -> CrossRankResult:
    """Claims (``straggler``, ``pipeline_bubble``) and job-level findings for a job."""
    active = [s for s in summaries if s.empty_reason is None and s.window_us > 0]
    if not active:
        return CrossRankResult()
    matched = match_collectives(active)
    waits = wait_claims(matched)
    barriers = barrier_waits(active, matched.offsets_us)
    if barriers is not None:
        for rank, b in barriers.claims.items():
            w = waits.get(rank)
            waits[rank] = (
                b if w is None else iv.union(np.concatenate((w[0], b[0])), np.concatenate((w[1], b[1])))
            )
    pipe = analyze_pipeline(active, matched.offsets_us) if len(active) >= 2 else None
    if pipe is not None:
        # Waiting in a collective for another stage of one's own pipeline replica is the
        # pipeline's drain (see gpuprof.job.collectives, "Untimed waits").
        for rank, own in own_pipeline_claims(matched).items():
            prior = pipe.claims.get(rank)
            merged = (
                own
                if prior is None
                else iv.union(np.concatenate((prior[0], own[0])), np.concatenate((prior[1], own[1])))
            )
            pipe = replace(pipe, claims={**pipe.claims, rank: merged})

    claims: dict[int, dict[Cause, Intervals]] = {}
    for rank, w in waits.items():
        claims.setdefault(rank, {})[Cause.STRAGGLER] = w
    if pipe is not None:
        for rank, b in pipe.claims.items():
            if b[0].size:
                claims.setdefault(rank, {})[Cause.PIPELINE_BUBBLE] = b

    stragglers, info = _stragglers(active, matched, pipe.claims if pipe is not None else None)
    slow = {x["rank"] for x in stragglers}
    totals = rank_totals(matched)
    per_rank: dict[int, dict[str, Any]] = {}
    for s in active:
        wait = float(totals["exposed_wait_us"].get(s.rank, 0.0))
        hidden = float(totals["wait_us"].get(s.rank, 0.0)) - wait
        row: dict[str, Any] = {
            "straggler_wait_us": round(wait, 3),
            "hidden_wait_us": round(max(hidden, 0.0), 3),
            "straggler_wait_us_per_step": round(wait / _steps(s), 3),
            "is_straggler": s.rank in slow,
            "last_arrivals": int(totals["last_calls"].get(s.rank, 0)),
            "collectives": int(totals["calls"].get(s.rank, 0)),
            "clock_offset_us": round(float(matched.offsets_us.get(s.rank, 0.0)), 3),
        }
        if barriers is not None:
            row["barrier_wait_us_per_step"] = round(barriers.wait_us.get(s.rank, 0.0) / _steps(s), 3)
        if pipe is not None and s.rank in pipe.stage_of:
            row["stage"] = pipe.stage_of[s.rank]
            stage_row = next(
                (r for r in pipe.findings.get("per_stage", []) if r["stage"] == row["stage"]), None
            )
            if stage_row is not None:
                row["bubble_fraction"] = stage_row["bubble_fraction"]
        per_rank[s.rank] = row

    waited: dict[int, Intervals] = {}
    for s in active:
        parts = [c for c in (waits.get(s.rank), pipe.claims.get(s.rank) if pipe else None) if c is not None]
        if parts:
            waited[s.rank] = iv.union(
                np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            )

    findings: dict[str, Any] = {
        "per_rank": per_rank,
        "stragglers": stragglers,
        "straggler_analysis": info,
        "critical_rank_per_step": _critical(active, waited) if len(active) >= 2 else [],
        "compute_imbalance": _imbalance(active, pipe),
    }
    if barriers is not None:
        findings["barrier_waits"] = _barrier_findings(barriers, active, matched.offsets_us)
    if pipe is not None:
        findings["pipeline"] = dict(pipe.findings)
    bandwidth = job_bandwidth(active, matched.calls_table if matched.n_calls else None)
    if bandwidth:
        findings["collective_bandwidth"] = dict(bandwidth)
    model = build_job_model(
        active,
        matched,
        matched.offsets_us,
        pipe.stage_of if pipe is not None else {},
        pipe.findings if pipe is not None else None,
        barriers.points_us if barriers is not None else (),
        pipe.bubble_us_per_step if pipe is not None else None,
    )
    whatifs = run_whatifs(model) if model is not None else None
    findings["whatif"] = whatifs.to_dict() if whatifs is not None else None
    return CrossRankResult(claims=claims, findings=findings, whatifs=whatifs)
