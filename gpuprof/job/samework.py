"""Ranks that do the same work, compared: the duration what-ifs that even it out.

Same-work peers (``peers_of[rank]``, the rank itself included) are the replicas of one
pipeline stage, or the ranks at one (pipeline, tensor) position of an op-level timeline,
else every rank of the job (see :func:`gpuprof.job.assemble.build_job_model`). Their
compute is compared per step and per *segment* (the work between consecutive collectives,
which every data-parallel peer runs alike). From that:

* :func:`peer_factors`: per-event factors that bring a rank's compute to the median of its
  peers, the other ranks doing the same work (``peer_median_compute``); :func:`slow_ranks`: ranks slower than their peers in every
  step (a slow GPU), which :func:`batch_factors` leaves at their speed;
* :func:`batch_factors`: every op of a type at the mean of its type over the stage's
  replicas and microbatches in the step (``balanced_batches``); :func:`variation_factors`:
  every op at its type's mean over the job (``no_variation``);
* :func:`stage_factors`: each stage's compute at the mean over stages (``balanced_stages``);
* :func:`host_cuts`: a rank's own host work at its peers' median (``peer_median_host``);
* for the advice: :func:`op_variation`, :func:`heavy_ranks`, :func:`slowest_per_step`.

Pure functions of the job model's tables (:class:`gpuprof.job.whatifs.JobModel` calls them
with its own); nothing is changed in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_COMPUTE, EV_P2P, RankGraph
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
# Each rank's same-work peers, itself included.
Peers = Mapping[int, tuple[int, ...]]

# A rank whose compute per step is this many times the median of its same-work peers is
# slow for a reason of its own (a slow GPU, clocks, node, or more data), not its layers.
SLOW_RANK_RATIO = 1.15


def work_groups(peers_of: Peers) -> dict[int, int]:
    """Each rank's same-work group (its stage's replicas), numbered by its lowest rank."""
    out: dict[int, int] = {}
    for members in {tuple(sorted(v)) for v in peers_of.values()}:
        for r in members:
            out[r] = min(members)
    return out


def _members_with_steps(peers_of: Peers, compute_by_step: Mapping[int, FloatArray]) -> dict[int, list[int]]:
    """Per same-work group (numbered by its lowest rank), its ranks that have compute per step."""
    members: dict[int, list[int]] = {}
    for r, grp in work_groups(peers_of).items():
        if r in compute_by_step:
            members.setdefault(grp, []).append(r)
    return members


def heavy_ranks(
    peers_of: Peers, compute_by_step: Mapping[int, FloatArray], margin: float = 0.01
) -> list[int]:
    """Ranks that computed more than their same-work group's mean (by ``margin``) in
    some step: where ``balanced_batches`` takes work away."""
    members = _members_with_steps(peers_of, compute_by_step)
    out: set[int] = set()
    for ranks in members.values():
        if len(ranks) < 2:
            continue
        steps = min(int(compute_by_step[r].size) for r in ranks)
        table = np.vstack([compute_by_step[r][:steps] for r in ranks])
        mean = table.mean(axis=0)
        heavy = (table > mean * (1.0 + margin)) & (mean > 0)
        out.update(r for r, row in zip(ranks, heavy) if row.any())
    return sorted(out)


def slowest_per_step(peers_of: Peers, compute_by_step: Mapping[int, FloatArray]) -> dict[int, list[int]]:
    """Per same-work group (numbered by its lowest rank) with two or more ranks, the rank
    with the most compute in each step."""
    out: dict[int, list[int]] = {}
    members = _members_with_steps(peers_of, compute_by_step)
    for grp, ranks in members.items():
        if len(ranks) < 2:
            continue
        steps = min(int(compute_by_step[r].size) for r in ranks)
        out[grp] = [max(ranks, key=lambda r: float(compute_by_step[r][t])) for t in range(steps)]
    return out


def named_graphs(graphs: Sequence[RankGraph]) -> list[RankGraph]:
    """The graphs whose events carry op names (op-level timelines); the op-type
    what-ifs apply only when every rank's does."""
    named = [g for g in graphs if g.name_idx is not None and g.names]
    return named if len(named) == len(graphs) else []


def op_variation(graphs: Sequence[RankGraph], peers_of: Peers) -> dict[str, tuple[float, float, int]]:
    """Op-level timelines: per compute op type, its mean duration (us), its coefficient
    of variation among the ranks that do the same work (the median over stages: a heavier
    stage is not variation) and how many ops."""
    groups = work_groups(peers_of)
    parts: dict[tuple[str, int], list[FloatArray]] = {}
    for g in named_graphs(graphs):
        assert g.name_idx is not None
        comp = g.kind == EV_COMPUTE
        for k, name in enumerate(g.names):
            d = g.dur[comp & (g.name_idx == k)]
            if d.size:
                parts.setdefault((name, groups.get(g.rank, -1)), []).append(d)
    by_name: dict[str, list[tuple[float, float, int]]] = {}
    for (name, _), p in parts.items():
        d = np.concatenate(p)
        m = float(np.mean(d))
        by_name.setdefault(name, []).append((m, float(np.std(d)) / m if m > 0 else 0.0, int(d.size)))
    return {
        name: (
            float(np.average([m for m, _, _ in rows], weights=[k for _, _, k in rows])),
            float(np.median([cv for _, cv, _ in rows])),
            sum(k for _, _, k in rows),
        )
        for name, rows in by_name.items()
    }


def variation_factors(graphs: Sequence[RankGraph]) -> dict[int, FloatArray]:
    """``no_variation``: per rank, each event's factor to the mean duration of its op
    type over every rank and step (compute) or to the median (communication)."""
    graphs = named_graphs(graphs)
    if not graphs:
        return {}
    durs: dict[str, list[FloatArray]] = {}
    for g in graphs:
        assert g.name_idx is not None
        for k, name in enumerate(g.names):
            durs.setdefault(name, []).append(g.dur[g.name_idx == k])
    target: dict[str, float] = {}
    for name, parts in durs.items():
        d = np.concatenate(parts)
        if not d.size:
            continue
        # communication names are the same op type on every rank, as are compute's
        target[name] = float(np.mean(d))
    comm_target = {n: float(np.median(np.concatenate(p))) for n, p in durs.items() if np.concatenate(p).size}
    out: dict[int, FloatArray] = {}
    for g in graphs:
        assert g.name_idx is not None
        comm = (g.kind == EV_COLLECTIVE) | (g.kind == EV_P2P)
        want = np.array([target.get(n, 0.0) for n in g.names])[g.name_idx]
        want = np.where(comm, np.array([comm_target.get(n, 0.0) for n in g.names])[g.name_idx], want)
        ok = (g.dur > 0) & ((g.kind == EV_COMPUTE) | comm)
        out[g.rank] = np.where(ok, want / np.where(g.dur > 0, g.dur, 1.0), 1.0)
    return out


def batch_factors(
    graphs: Sequence[RankGraph],
    peers_of: Peers,
    step_of_event: Mapping[int, IntArray],
    compute_us_per_step: Mapping[int, float],
) -> dict[int, FloatArray]:
    """``balanced_batches``: per rank, each compute event's factor to the mean duration
    of its op type over its stage's replicas (its same-work peers) and microbatches in
    the same step; a persistently slow rank keeps its speed."""
    graphs = named_graphs(graphs)
    if not graphs or not peers_of:
        return {}
    speed = {r: float(x) for r, x in slow_ranks(peers_of, compute_us_per_step).items()}
    group_of = work_groups(peers_of)
    names: dict[str, int] = {}
    rows: list[tuple[FloatArray, ...]] = []
    for g in graphs:
        if g.rank not in group_of or g.rank not in step_of_event:
            continue
        assert g.name_idx is not None
        code = np.array([names.setdefault(n, len(names)) for n in g.names], dtype=np.int64)[g.name_idx]
        comp = g.kind == EV_COMPUTE
        sp = speed.get(g.rank, 1.0)
        step = step_of_event[g.rank]
        rows.append(
            (
                np.full(int(comp.sum()), g.rank, dtype=np.float64),
                np.full(int(comp.sum()), group_of[g.rank], dtype=np.float64),
                step[comp].astype(np.float64),
                code[comp].astype(np.float64),
                g.dur[comp] / sp,
            )
        )
    if not rows:
        return {}
    rank, grp, step, code, norm = (np.concatenate(c) for c in zip(*rows))
    key = np.stack((grp, step, code), axis=1)
    _, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    mean = np.bincount(inv, weights=norm) / np.maximum(np.bincount(inv), 1)
    target = mean[inv]
    out: dict[int, FloatArray] = {}
    for g in graphs:
        sel = rank == g.rank
        if not sel.any():
            continue
        comp = g.kind == EV_COMPUTE
        f = np.ones(g.n_events)
        sp = speed.get(g.rank, 1.0)
        d = g.dur[comp]
        f[comp] = np.where(d > 0, target[sel] * sp / np.where(d > 0, d, 1.0), 1.0)
        out[g.rank] = f
    return out


def others_medians(table: FloatArray) -> FloatArray:
    """Per row of ``table`` (ranks x columns), the median of the *other* rows in each column
    (the row itself left out: with two ranks, each one's median is the other's value).
    From one sort per column: leaving one value out shifts the order statistics behind it."""
    n = table.shape[0]
    if n < 2:
        return np.full(table.shape, np.nan)
    order = np.argsort(table, axis=0, kind="stable")
    srt = np.take_along_axis(table, order, axis=0)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(n)[:, None].repeat(table.shape[1], axis=1), axis=0)
    cols = np.arange(table.shape[1])[None, :]

    def at(q: int) -> FloatArray:
        # The q-th smallest of the others: the q-th of all, or the next when the row's own
        # value sits at or before q.
        idx = np.where(pos <= q, q + 1, q)
        return np.asarray(srt[idx, cols], dtype=np.float64)

    k = n - 1
    if k % 2 == 1:
        return at(k // 2)
    return 0.5 * (at(k // 2 - 1) + at(k // 2))


def peer_factors(
    peers_of: Peers,
    segment_of_event: Mapping[int, IntArray],
    compute_by_segment: Mapping[int, FloatArray],
    step_of_event: Mapping[int, IntArray],
    compute_by_step: Mapping[int, FloatArray],
    compute_us_per_step: Mapping[int, float],
) -> dict[int, FloatArray]:
    """Per rank, a factor for each of its events: its compute in each *segment* (the
    work between two consecutive collectives, which every data-parallel peer runs alike)
    scaled to the median of its peers' (the *other* ranks doing the same work) compute in
    that segment, never above 1 -- a slow GPU is slow in every segment, data-dependent
    imbalance (a longer rollout, a longer sequence) in some. Peers with a different
    sequence of collectives are compared step by step, and on their means when even their
    step counts differ. Ranks with nothing to scale are left out. The medians are worked
    out once per group of peers (:func:`others_medians`)."""
    out: dict[int, FloatArray] = {}
    medians: dict[tuple[int, tuple[int, ...]], dict[int, FloatArray] | None] = {}
    tables = ((segment_of_event, compute_by_segment), (step_of_event, compute_by_step))
    for r, peers in peers_of.items():
        for which, (index, table) in enumerate(tables):
            mine = table.get(r)
            key = (which, tuple(peers))
            if key not in medians:
                members = [q for q in peers if q in table]
                rows = [table[q] for q in members]
                size = rows[0].size if rows else 0
                ok = len(rows) >= 2 and size > 0 and all(x.size == size for x in rows)
                if ok and which == 0:
                    # Segments line up only where every peer computes in the same ones: a
                    # collective that started late on one rank (queued behind one that waited)
                    # moves that rank's boundaries, and its segments no longer compare.
                    busy = np.vstack(rows) > 0
                    ok = bool(np.all(busy == busy[0]))
                medians[key] = dict(zip(members, others_medians(np.vstack(rows)))) if ok else None
            got = medians[key]
            med = got.get(r) if got is not None else None
            if mine is None or med is None or mine.size != med.size:
                continue
            f = np.where(mine > 0, np.minimum(1.0, med / np.where(mine > 0, mine, 1.0)), 1.0)
            out[r] = f[np.clip(index[r], 0, f.size - 1)]
            break
        else:
            vals = [compute_us_per_step[q] for q in peers if q in compute_us_per_step and q != r]
            c = compute_us_per_step.get(r) or 0.0
            if vals and c > 0 and r in step_of_event:
                out[r] = np.full(step_of_event[r].size, min(1.0, float(np.median(vals)) / c))
    return out


def slow_ranks(peers_of: Peers, compute_us_per_step: Mapping[int, float]) -> dict[int, float]:
    """Ranks computing at least :data:`SLOW_RANK_RATIO` times the median of their
    same-work peers (the other ranks doing the same work), with that ratio."""
    out: dict[int, float] = {}
    for r, peers in peers_of.items():
        others = [compute_us_per_step[q] for q in peers if q != r and q in compute_us_per_step]
        mine = compute_us_per_step.get(r)
        if not others or not mine:
            continue
        med = float(np.median(others))
        if med > 0 and mine / med >= SLOW_RANK_RATIO:
            out[r] = mine / med
    return out


def typical(values: Sequence[float]) -> float:
    """The typical one of some replicas' values: the median, and of an even number the lower
    of the two middle ones (with two replicas, one of them slow, the healthy one)."""
    v = sorted(values)
    return float(v[(len(v) - 1) // 2])


def host_cuts(
    graphs: Sequence[RankGraph], peers_of: Peers, compute_by_step: Mapping[int, FloatArray]
) -> dict[int, Intervals]:
    """``peer_median_host``: per rank whose own host work per step (its ``host_work``
    intervals) is above the median of the other ranks doing the same work, the host time
    that brings it there. The host runs that much faster: its intervals are cut at every
    launch inside them and the same share of each piece is removed from its end, so each
    launch comes earlier by that share of the host work before it (a uniform speed-up, not
    one cut per interval that would leave the launches inside it where they were)."""
    work = {g.rank: g.removable.get("host_work") for g in graphs}
    steps = {g.rank: max(int(compute_by_step[g.rank].size), 1) if g.rank in compute_by_step else 1 for g in graphs}
    per_step = {r: iv.total(w) / steps[r] for r, w in work.items() if w is not None and w[0].size}
    out: dict[int, Intervals] = {}
    for g in graphs:
        r = g.rank
        own = per_step.get(r, 0.0)
        peers = [per_step[q] for q in peers_of.get(r, ()) if q in per_step and q != r]
        w = work.get(r)
        if not peers or own <= 0 or w is None:
            continue
        target = float(np.median(peers))
        if own <= target * 1.001:
            continue
        keep = target / own
        cuts = np.unique(g.base[g.release_known]) if g.release_known.any() else np.zeros(0)
        lo, hi = [], []
        for a, b in zip(w[0].tolist(), w[1].tolist()):
            edges = np.concatenate(([a], cuts[(cuts > a) & (cuts < b)], [b]))
            lo.append(edges[:-1] + keep * np.diff(edges))
            hi.append(edges[1:])
        out[r] = (np.concatenate(lo), np.concatenate(hi))
    return out


def stage_factors(stage_of: Mapping[int, int], compute_us_per_step: Mapping[int, float]) -> dict[int, float]:
    """Per rank, the scale that brings its stage's compute to the mean over stages, from each
    rank's compute per step (as measured, or after an earlier change, e.g. the peer fix)."""
    comp = dict(compute_us_per_step)
    per_stage: dict[int, list[float]] = {}
    for r, st in stage_of.items():
        if r in comp:
            per_stage.setdefault(st, []).append(comp[r])
    if len(per_stage) < 2:
        return {}
    # A stage's time is its typical replica's: one slow replica is a slow rank (the peer
    # fix), not a heavier stage.
    stage_t = {st: typical(v) for st, v in per_stage.items()}
    mean = float(np.mean(list(stage_t.values())))
    return {r: mean / stage_t[st] for r, st in stage_of.items() if r in comp and stage_t[st] > 0}


__all__ = [
    "SLOW_RANK_RATIO",
    "batch_factors",
    "heavy_ranks",
    "host_cuts",
    "named_graphs",
    "op_variation",
    "others_medians",
    "peer_factors",
    "slow_ranks",
    "slowest_per_step",
    "stage_factors",
    "typical",
    "variation_factors",
    "work_groups",
]
