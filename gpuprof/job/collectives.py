"""Matching collectives across ranks, aligning clocks on them, and measuring straggler waits.

Matching
    The same collective on different ranks is the call with the same process group, the
    same collective name, the same step and the same position among the rank's calls of
    that group and name in that step. NCCL requires every member to issue a group's
    collectives in the same order, so the order is also the same within each name; keying
    by name as well keeps the match right when the trace does not name process groups and
    the job interleaves collectives of different groups differently on different ranks
    (all-to-all on one group, all-reduce on another).

Clock alignment
    Ranks recorded on different hosts have skewed clocks: each trace file gets one offset,
    so that matched collectives end together (:mod:`gpuprof.job.clocks`).

Waits
    With clocks aligned, a rank's arrival at a collective is the device start of its call.
    The time from its arrival to the last member's arrival (at most the call's duration)
    is spent waiting for a slower rank: the ``straggler`` cause. When a group is not
    complete in the input (2 of 128 ranks sampled), the last member may be absent: the
    waits measured among the ranks present are lower bounds, and the slow rank is not
    named.

Untimed waits (op-level timelines)
    A collective's timer often records its transfer only, and the wait for the last
    member is an idle gap before the op: a worker arrives when its last activity before
    the op ends (:mod:`gpuprof.job.untimed`), and the part of a wait spent on its own
    pipeline replica is ``pipeline_bubble``. Barriers before timer ops are in
    :mod:`gpuprof.job.barriers`.

World size inferred
    Split files often say nothing of the world size (no ``distributedInfo.world_size``,
    no process groups). When the ranks in the input are ``0..N-1`` without a gap (N >= 2)
    and every collective matched across ranks has exactly those N members, the job is
    taken to be complete: groups of unknown size get N members, so the slow rank is
    named. A collective that only one rank has (a call at the edge of one rank's window)
    does not count against it, as long as such calls are at most
    :data:`INFER_MAX_UNMATCHED_SHARE` of all collectives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpuprof.accounting.summary import RankSummary
from gpuprof.job.clocks import clock_offsets
from gpuprof.job.untimed import own_replica_waits, ready_times
from gpuprof.model import grouping
from gpuprof.model import intervals as iv
from gpuprof.model.table import FrameField, Table
from gpuprof.model.timeline import Category

if TYPE_CHECKING:  # pandas is imported by the functions that use it
    import pandas as pd


@dataclass(frozen=True)
class MatchedCollectives:
    """The result of matching, one row per (rank, collective call) in ``calls``.

    Columns of ``calls``: ``rank``; ``key`` (one id per matched collective); ``pg``,
    ``coll_name``, ``step``, ``k`` (what the key is made of);
    ``start_us``, ``end_us`` (rank's own clock); ``ready_us`` (when the rank arrived, own
    clock: the start, or in an op-level timeline the end of its last activity before the
    op); ``arrival_us`` (``ready_us`` on the aligned clock); ``duration_us``; ``wait_us``
    (time waiting for the last member present, from ``ready_us``); ``own_wait_us`` (the
    part of it until the last member of the rank's own pipeline replica arrived, 0 without
    a layout);
    ``exposed_wait_us`` (the part of that wait with no compute beside it on the rank: the
    part that costs time);
    ``lateness_us`` (arrival minus the median arrival of the members present);
    ``is_last`` (arrived last among those present); ``n_present``, ``n_expected``
    (members in the input / in the group, -1 unknown); ``complete`` (all members present).

    ``offsets_us[rank]`` is subtracted from that rank's times to align clocks.
    ``unmatched`` counts calls that no other rank of their group has a partner for
    (a rank issued more calls of a group in a step than the others present).
    """

    # Given as a Table or a DataFrame, read as a DataFrame (pandas is imported then);
    # n_calls and calls_table read it without pandas.
    if TYPE_CHECKING:  # the descriptor has no default, which mypy cannot tell here
        calls: pd.DataFrame
    else:
        calls: FrameField = FrameField()
    offsets_us: Mapping[int, float]
    unmatched: int
    incomplete_groups: Mapping[str, tuple[int, int]]  # pg -> (present, expected)
    # N when the world size was not in the input and was inferred from the collectives
    # (see the module docstring); None otherwise.
    world_size_inferred: int | None = None

    @property
    def calls_table(self) -> Table:
        """``calls`` as numpy columns, without pandas."""
        return MatchedCollectives.__dict__["calls"].table(self)  # type: ignore[no-any-return]

    @property
    def n_calls(self) -> int:
        """Rows of ``calls`` (without pandas)."""
        return len(self.calls_table)


_CALLS_DTYPES: Mapping[str, str] = {
    "rank": "int64",
    "row": "int64",
    "key": "int64",
    "pg": "object",
    "step": "int64",
    "k": "int64",
    "coll_name": "object",
    "start_us": "float64",
    "end_us": "float64",
    "ready_us": "float64",
    "arrival_us": "float64",
    "duration_us": "float64",
    "wait_us": "float64",
    "own_wait_us": "float64",
    "exposed_wait_us": "float64",
    "lateness_us": "float64",
    "is_last": "bool",
    "n_present": "int64",
    "n_expected": "int64",
    "complete": "bool",
}


def _empty_calls() -> Table:
    return Table({c: np.empty(0, dtype=t) for c, t in _CALLS_DTYPES.items()}, tuple(_CALLS_DTYPES))


def _has_collectives(s: RankSummary) -> bool:
    c = s.comms_table
    return len(c) > 0 and bool((c["category"] == int(Category.COLLECTIVE)).any())


def _gather(summaries: Sequence[RankSummary]) -> dict[str, np.ndarray]:
    """Every rank's collective calls, one row each, sorted by (rank, process group, name,
    step, issue order), with ``k`` (position within (rank, pg, name, step): robust to
    windows that differ by a partial step, since counting restarts every step) and
    ``key`` (one id per (pg, name, step, k), numbered by first appearance).

    Strings are coded once (in order of first appearance, pg and name over all ranks'
    calls in input order); every grouping below works on integer codes, which keeps
    matching fast at hundreds of ranks with thousands of calls each."""
    parts: dict[str, list[np.ndarray]] = {
        c: [] for c in ("rank", "row", "start_us", "end_us", "seq", "step", "ready_us", "ready_kind", "replica", "src")
    }
    pgs: list[str] = []
    colls: list[str] = []
    sources: dict[str, int] = {}
    for s in summaries:
        c = s.comms_table
        if len(c) == 0:
            continue
        rows = np.flatnonzero(np.asarray(c["category"]) == int(Category.COLLECTIVE))
        if rows.size == 0:
            continue
        n = rows.size
        start = np.asarray(c["start_us"], dtype=np.float64)[rows]
        ready, kind = ready_times(s, start) if s.holds.untimed_waits else (start, np.zeros(n, dtype=np.int8))
        parts["rank"].append(np.full(n, s.rank, dtype=np.int64))
        parts["row"].append(rows.astype(np.int64))
        parts["start_us"].append(start)
        parts["end_us"].append(np.asarray(c["end_us"], dtype=np.float64)[rows])
        parts["seq"].append(np.asarray(c["seq"])[rows])
        parts["step"].append(np.asarray(c["step"])[rows].astype(np.int64))
        parts["ready_us"].append(np.asarray(ready, dtype=np.float64))
        parts["ready_kind"].append(np.asarray(kind, dtype=np.int8))
        replica = int(s.parallel.get("dp_rank", -1)) if "pp_rank" in s.parallel else -1
        parts["replica"].append(np.full(n, replica, dtype=np.int64))
        parts["src"].append(np.full(n, sources.setdefault(s.source, len(sources)), dtype=np.int64))
        pgs.extend(str(v) for v in c["pg"][rows].tolist())
        colls.extend(str(v) for v in c["coll_name"][rows].tolist())
    cols = {name: np.concatenate(p) for name, p in parts.items()}
    pg_code = grouping.factorize(pgs)
    coll_code = grouping.factorize(colls)
    pg_names = np.empty(len(pgs), dtype=object)
    pg_names[:] = pgs
    coll_names = np.empty(len(colls), dtype=object)
    coll_names[:] = colls
    cols.update(pg_code=pg_code, coll_code=coll_code, pg=pg_names, coll_name=coll_names)
    order = np.lexsort((cols["seq"], cols["step"], coll_code, pg_code, cols["rank"]))
    cols = {name: col[order] for name, col in cols.items()}
    lane = (cols["rank"], cols["pg_code"], cols["coll_code"], cols["step"])
    cols["k"] = grouping.cumcount(grouping.runs(lane, order.size))
    cols["key"] = grouping.groups(cols["pg_code"], cols["coll_code"], cols["step"], cols["k"])[0]
    cols["source_names"] = np.array(list(sources), dtype=object)  # indexed by src code
    return cols


def _expected_sizes(
    summaries: Sequence[RankSummary], pgs: Sequence[str], present: Mapping[str, int]
) -> dict[str, int]:
    """Members each process group should have; -1 when the input does not say."""
    declared: dict[str, int] = {}
    for s in summaries:
        for name, ranks in (s.process_groups or {}).items():
            declared[str(name)] = max(declared.get(str(name), 0), len(ranks))
    world = max((s.world_size or 0) for s in summaries) if summaries else 0
    whole = all(s.holds.whole_groups for s in summaries)
    out: dict[str, int] = {}
    for pg in pgs:
        if pg in declared:
            out[pg] = declared[pg]
        elif whole:
            # Groups derived from the layout, of files that hold every worker they
            # recorded (op-level timelines): the members present are the group.
            out[pg] = present[pg]
        elif pg == "" and world > 0:
            out[pg] = world  # unnamed: NCCL's default group spans the world
        else:
            out[pg] = -1
    return out


# Collectives that only one rank has may be at most this share of all of them for the
# world size to be inferred.
INFER_MAX_UNMATCHED_SHARE = 0.1


def _inferred_world(
    summaries: Sequence[RankSummary], size: np.ndarray, expected: Mapping[str, int]
) -> int | None:
    """N when nothing in the input gives a group size and ranks ``0..N-1`` are every
    member of every matched collective (see the module docstring); else ``None``.
    ``size``: the members present of each collective (one entry per key)."""
    if any(s.world_size for s in summaries) or any(n > 0 for n in expected.values()):
        return None
    ranks = sorted({s.rank for s in summaries})
    n = len(ranks)
    if n < 2 or ranks != list(range(n)):
        return None
    matched = size[size >= 2]
    if len(matched) == 0 or not bool((matched == n).all()):
        return None
    if int((size < 2).sum()) > INFER_MAX_UNMATCHED_SHARE * len(size):
        return None
    return n


def inferred_world_note(n: int) -> str:
    """The report's line for a world size inferred from the collectives."""
    return (
        f"world size inferred from the collectives: {n} (ranks 0-{n - 1} are all in the input and every "
        f"collective matched across ranks has exactly these {n} members)"
    )


def _exposed(
    ranks: np.ndarray, start: np.ndarray, wait: np.ndarray, summaries: Sequence[RankSummary]
) -> np.ndarray:
    """Per call, how much of its wait lies in the rank's lost time (no compute beside it)."""
    out = np.zeros(ranks.size)
    lost = {s.rank: s.lost for s in summaries}
    order = np.argsort(ranks, kind="stable")
    bounds = np.flatnonzero(np.diff(ranks[order])) + 1
    for idx in np.split(order, bounds):
        if idx.size == 0:
            continue
        r = int(ranks[idx[0]])
        lo = lost.get(r)
        if lo is None:
            continue
        out[idx] = iv.overlap_with_each((start[idx], start[idx] + wait[idx]), lo)
    return out


def match_collectives(summaries: Sequence[RankSummary]) -> MatchedCollectives:
    """Match collective calls across ranks, align clocks, and measure each call's wait."""
    if not any(_has_collectives(s) for s in summaries):
        return MatchedCollectives(_empty_calls(), {s.rank: 0.0 for s in summaries}, 0, {})  # type: ignore[arg-type]
    g = _gather(summaries)
    key = g["key"]
    n_keys = int(key.max()) + 1
    names = g["source_names"]
    by_source = dict(zip(names.tolist(), clock_offsets(key, n_keys, g["src"], names.size, g["end_us"]).tolist()))
    offsets = {s.rank: float(by_source.get(s.source, 0.0)) for s in summaries}

    rank = g["rank"]
    ranks, rank_idx = np.unique(rank, return_inverse=True)
    rank_offset = np.array([offsets[int(r)] for r in ranks.tolist()], dtype=np.float64)
    start, end, ready = g["start_us"], g["end_us"], g["ready_us"]
    arrival = ready - rank_offset[rank_idx.reshape(-1)]
    # A rank has at most one call per key (k counts its calls), so size = ranks present.
    n_present = grouping.size(key, n_keys)
    present_n = n_present[key]
    last = grouping.maximum(key, arrival, n_keys)[key]
    median = grouping.median(key, arrival, n_keys)[key]
    # Waiting lasts from the arrival to the last member's, at most until the op ends.
    reach = np.clip(end - ready, 0.0, None)
    wait = np.clip(last - arrival, 0.0, reach)
    wait[present_n < 2] = 0.0
    own = own_replica_waits(key, g["replica"], arrival, g["ready_kind"], wait)
    exposed = _exposed(rank, ready, wait, summaries)

    pg_code = g["pg_code"]
    n_pg = int(pg_code.max()) + 1
    pg_ranks = grouping.nunique(pg_code, rank, n_pg)
    # Groups in the order they first appear among the sorted calls.
    codes_seen, first = np.unique(pg_code, return_index=True)
    pg_name = {int(c): str(g["pg"][i]) for c, i in zip(codes_seen.tolist(), first.tolist())}
    present: dict[str, int] = {
        pg_name[int(c)]: int(pg_ranks[c]) for c in codes_seen[np.argsort(first, kind="stable")].tolist()
    }
    expected = _expected_sizes(summaries, list(present), present)
    world = _inferred_world(summaries, n_present, expected)
    if world is not None:
        expected = {pg: world for pg in expected}
    expected_of_code = np.array([expected[pg_name[c]] for c in range(n_pg)], dtype=np.int64)
    n_expected = expected_of_code[pg_code]
    incomplete = {
        pg: (int(present[pg]), int(expected[pg]))
        for pg in present
        if expected[pg] < 0 or present[pg] < expected[pg]
    }
    unmatched = int(((present_n < 2) & (pg_ranks[pg_code] >= 2)).sum())
    calls = Table(
        {
            "rank": rank,
            "row": g["row"],
            "key": key,
            "pg": g["pg"],
            "step": g["step"],
            "k": g["k"],
            "coll_name": g["coll_name"],
            "start_us": start,
            "end_us": end,
            "ready_us": ready,
            "arrival_us": arrival,
            "duration_us": end - start,
            "wait_us": wait,
            "own_wait_us": own,
            "exposed_wait_us": exposed,
            "lateness_us": arrival - median,
            "is_last": (arrival >= last) & (present_n >= 2),
            "n_present": present_n,
            "n_expected": n_expected,
            "complete": (n_expected > 0) & (present_n >= n_expected),
        },
        tuple(_CALLS_DTYPES),
    )
    return MatchedCollectives(calls, offsets, unmatched, incomplete, world)  # type: ignore[arg-type]


def wait_claims(matched: MatchedCollectives) -> dict[int, iv.Intervals]:
    """Per rank, the intervals (own clock) spent waiting for a later rank in collectives
    (from its arrival, ``ready_us``); the part spent waiting for its own pipeline replica
    (:func:`own_pipeline_claims`) included. Ranks in the order they first wait."""
    t = matched.calls_table
    if matched.n_calls == 0:
        return {}
    wait = np.asarray(t["wait_us"], dtype=np.float64)
    sel = np.flatnonzero(wait > 0)
    if sel.size == 0:
        return {}
    ranks = np.asarray(t["rank"])[sel]
    start = np.asarray(t["ready_us"], dtype=np.float64)[sel]
    wait = wait[sel]
    out: dict[int, iv.Intervals] = {}
    _, first = np.unique(ranks, return_index=True)
    for r in ranks[np.sort(first)].tolist():
        mine = ranks == r
        out[int(r)] = iv.union(start[mine], start[mine] + wait[mine])
    return out


def own_pipeline_claims(matched: MatchedCollectives) -> dict[int, iv.Intervals]:
    """Per rank, the part of its collective waits spent waiting for another stage of its
    own pipeline replica (own clock): a stage draining into the step-end collectives."""
    t = matched.calls_table
    if matched.n_calls == 0 or not (t["own_wait_us"] > 0).any():
        return {}
    out: dict[int, iv.Intervals] = {}
    ranks = np.asarray(t["rank"])
    ready = np.asarray(t["ready_us"], dtype=np.float64)
    own = np.asarray(t["own_wait_us"], dtype=np.float64)
    for r in np.unique(ranks[own > 0]).tolist():
        sel = (ranks == r) & (own > 0)
        out[int(r)] = iv.union(ready[sel], ready[sel] + own[sel])
    return out


# Columns of :func:`rank_totals` (and of :func:`per_rank_waits`).
RANK_TOTALS = ("wait_us", "exposed_wait_us", "late_us", "calls", "last_calls", "complete_calls")


def rank_totals(matched: MatchedCollectives) -> dict[str, dict[int, float]]:
    """Per rank, in rank order: total wait, exposed wait, positive lateness, calls matched,
    calls arrived last, calls of complete groups (the columns of :func:`per_rank_waits`,
    as column -> rank -> value, without pandas; counts are ints)."""
    if matched.n_calls == 0:
        return {c: {} for c in RANK_TOTALS}
    t = matched.calls_table
    ranks, idx = np.unique(np.asarray(t["rank"]), return_inverse=True)
    idx = idx.reshape(-1)
    n = ranks.size
    keys = [int(r) for r in ranks.tolist()]
    sums = {
        "wait_us": grouping.total(idx, t["wait_us"], n),
        "exposed_wait_us": grouping.total(idx, t["exposed_wait_us"], n),
        "late_us": grouping.total(idx, np.clip(np.asarray(t["lateness_us"], dtype=np.float64), 0.0, None), n),
    }
    counts = {
        "calls": grouping.size(idx, n),
        "last_calls": np.bincount(idx, weights=np.asarray(t["is_last"], dtype=np.float64), minlength=n),
        "complete_calls": np.bincount(idx, weights=np.asarray(t["complete"], dtype=np.float64), minlength=n),
    }
    out: dict[str, dict[int, float]] = {c: dict(zip(keys, v.tolist())) for c, v in sums.items()}
    for c, v in counts.items():
        out[c] = dict(zip(keys, (int(x) for x in v.tolist())))
    return {c: out[c] for c in RANK_TOTALS}


def per_rank_waits(matched: MatchedCollectives) -> pd.DataFrame:
    """Per rank: total wait, total positive lateness, calls matched, calls arrived last.

    Columns: ``wait_us``, ``exposed_wait_us``, ``late_us`` (sum of positive lateness: how
    far behind the median member it arrived, summed), ``calls``, ``last_calls``,
    ``complete_calls``; indexed by rank. (A DataFrame for callers that want one; the
    analysis reads :func:`rank_totals`.)
    """
    import pandas as pd

    if matched.n_calls == 0:
        return pd.DataFrame(columns=list(RANK_TOTALS))
    totals = rank_totals(matched)
    index = pd.Index(list(totals["calls"]), name="rank")
    return pd.DataFrame({c: [totals[c][r] for r in index] for c in RANK_TOTALS}, index=index)


def waits_per_step(matched: MatchedCollectives) -> pd.DataFrame:
    """Straggler wait per (step, rank) in microseconds (steps -1 where unknown)."""
    import pandas as pd
    calls = matched.calls
    if len(calls) == 0:
        return pd.DataFrame(columns=["step", "rank", "wait_us"])
    return calls.groupby(["step", "rank"])["wait_us"].sum().reset_index()
