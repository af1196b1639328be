"""Naming the stragglers: the ranks the others wait for in collectives, and why.

From the matched collectives (:mod:`gpuprof.job.collectives`): the waiting each rank
caused in complete groups (the median exposed wait of the others at the collectives it
arrived last at), what the job's critical path loses to it (its arrival minus the
next-latest member's, :func:`_critical_gains`), whether lateness rotates among the ranks
(data-dependent imbalance, no one rank to fix), the ranks that start early and wait,
and for each straggler the phase that makes it slow and how late it begins its step.
:func:`name_stragglers` gives the ``stragglers`` and ``straggler_analysis`` findings (keys
in :mod:`gpuprof.job.cross_rank`). Waits a pipeline-bubble claim covers are the
pipeline's, not a late rank's doing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuprof.accounting.phases import PHASES
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.collectives import MatchedCollectives, inferred_world_note, rank_totals
from gpuprof.job.findings import AloneInput, Arrivals, EarlyStarter, Straggler, StragglerAnalysis
from gpuprof.model import grouping
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
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


def _median_step_us(summaries: Sequence[RankSummary]) -> float:
    return float(np.median([s.window_us / s.step_count for s in summaries])) if summaries else 0.0


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
) -> list[EarlyStarter]:
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
        if wait / s.step_count < EARLY_LEAD_SHARE * lead[r]:
            continue  # it spends its lead working, not waiting
        out.append(
            EarlyStarter(
                rank=r,
                lead_us=round(lead[r], 3),
                lead_over_last_us=round(max(starts.values()) - starts[r], 3),
                wait_us_per_step=round(wait / s.step_count, 3),
            )
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


def name_stragglers(
    summaries: Sequence[RankSummary],
    matched: MatchedCollectives,
    bubbles: Mapping[int, Intervals] | None = None,
) -> tuple[tuple[Straggler, ...], StragglerAnalysis]:
    """The named stragglers of the job and how the waits were measured
    (:mod:`gpuprof.job.findings`); ``bubbles``: the pipeline-bubble claims per rank."""
    offsets = {r: round(o, 3) for r, o in matched.offsets_us.items()}
    world = max((s.world_size or 0) for s in summaries) if summaries else 0
    if len(summaries) < 2:
        # A single-GPU job (no collectives, no world size) has nobody to wait for; one rank's
        # calls are matched with nobody's.
        alone = AloneInput(len(summaries), world or None) if world > 1 or matched.n_calls else None
        return (), StragglerAnalysis(offsets, matched.unmatched, alone=alone)
    info = StragglerAnalysis(
        offsets,
        matched.unmatched,
        collectives_matched=int(np.unique(matched.calls_table["key"]).size) if matched.n_calls else 0,
        world_size_inferred=matched.world_size_inferred,
        world_size_note=(
            inferred_world_note(matched.world_size_inferred) if matched.world_size_inferred is not None else None
        ),
        incomplete_groups={pg or "(unnamed)": (a, b) for pg, (a, b) in matched.incomplete_groups.items()},
    )
    caused = _caused_waits(matched)
    total = sum(c for c, _ in caused.values())
    steps = float(np.median([s.step_count for s in summaries]))
    floor = STRAGGLER_MIN_STEP_SHARE * _median_step_us(summaries) * steps
    by_rank = {s.rank: s for s in summaries}
    complete_calls = rank_totals(matched)["complete_calls"]
    out: list[Straggler] = []
    names = [r for r, (c, _) in caused.items() if total > 0 and c >= STRAGGLER_SHARE * total and c >= floor]
    gain_rank, gain_us = _critical_gains(matched, bubbles or {})
    if gain_rank.size:
        counts = _value_counts(gain_rank)
        rotating = bool(
            len(counts) >= ROTATING_MIN_RANKS
            and next(iter(counts.values())) <= ROTATING_MAX_SHARE * gain_rank.size
            and float(np.sum(gain_us)) >= floor
        )
        info = replace(info, arrivals=Arrivals(
            collectives=int(gain_rank.size),
            last_counts={int(r): int(n) for r, n in counts.items()},
            rotating=rotating,
            gain_us_per_step=round(float(np.sum(gain_us)) / steps, 3),
        ))
        if rotating:
            # Every rank takes its turn at being last: no one rank to fix.
            names = []
    if names:
        info = replace(info, stragglers_gain_us_per_step=round(_group_gain_us(matched, bubbles or {}, names) / steps, 3))
    info = replace(info, early_starters=tuple(_early_starters(summaries, matched, floor / max(steps, 1.0))))
    for rank in sorted(names, key=lambda r: -caused[r][0]):
        s = by_rank[rank]
        others = [x for x in summaries if x.rank not in names]
        phase, ratio, excess = _phase_of(s, others)
        if excess is not None and excess < PHASE_MIN_SHARE * caused[rank][0] / s.step_count:
            # A phase a little slower than the others does not explain the wait it causes.
            phase, ratio, excess = None, None, None
        late = _late_start_us(s, summaries, matched.offsets_us)
        mine = gain_us[gain_rank == rank]
        out.append(
            Straggler(
                rank=rank,
                caused_wait_us_per_step=round(caused[rank][0] / s.step_count, 3),
                last_arrivals=caused[rank][1],
                collectives=int(complete_calls.get(rank, 0)),
                phase=phase,
                phase_ratio=None if ratio is None else round(ratio, 3),
                phase_excess_us_per_step=None if excess is None else round(excess, 3),
                late_start_us=None if late is None else round(late, 3),
                gain_us_per_step=round(float(np.sum(mine)) / s.step_count, 3),
                gains_us=tuple(round(float(g), 3) for g in sorted(mine.tolist(), reverse=True)),
            )
        )
    return tuple(out), info


__all__ = ["name_stragglers"]
