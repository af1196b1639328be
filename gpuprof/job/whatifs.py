"""The what-ifs behind every recommendation: one job model, replayed with each cause removed.

:func:`build_job_model` ties the ranks' graphs (:mod:`gpuprof.accounting.graph`) together
with the groups that couple them -- matched collectives, point-to-point pairs, barriers --
and :func:`run_whatifs` replays it unchanged (the model's error against the measured step
time) and once per what-if. Every saving is

    savings_pct = 100 * (replayed step, unchanged - replayed step, changed) / measured step

with the job's step time set by its slowest rank (the largest mean step time), so that the
model's error cancels as far as it is the same in both replays. The what-ifs
(:data:`WHATIFS`), each a change of host time, durations or edges:

``no_dataloader``       the DataLoader waits are deleted from host time.
``no_sync``             blocking syncs (``cudaStreamSynchronize``, ``.item()``, device-to-host
                        copies the host waited for) are deleted and no longer block.
``free_launches``       the framework operators that launch kernels, with their launch calls,
                        cost no host time (CUDA graphs / ``torch.compile``); the allocator
                        calls, syncs and input waits inside them stay (their own what-ifs).
``free_launch_calls``   only the launch calls cost nothing: the lower end of ``free_launches``.
``free_host``           all the host's own work on the launching threads (Python, framework,
                        launches) costs nothing; DataLoader waits, syncs, allocator calls and
                        blocking copies stay: the upper bound of any host-side speed-up.
``no_allocator``        device allocator calls are deleted and no longer synchronize.
``no_ddp_buffer_sync``  DDP's buffer broadcast at each forward is deleted from host time.
``pinned_copies``       copies from or to pageable host memory take no device time on the
                        critical path and their launch calls no longer block the host (pinned
                        buffers and ``non_blocking=True`` copies prefetched beside compute; an
                        upper bound).
``hidden_copies``       the other copies and memsets take no time on the critical path
                        (overlapped on a side stream, or avoided; an upper bound).
                        With either copy what-if the step stays at least as long as the
                        busiest copy direction keeps its copy engine busy (pinned copies'
                        measured time per step: :meth:`JobModel.copy_floor_us`).
``peer_median_compute`` every rank computes no slower than the median of its same-work peers
                        (the same pipeline stage on the other data-parallel replicas, else
                        every rank of a data-parallel job): the straggler test.
``balanced_stages``     each pipeline stage's compute scaled to the mean over stages.
``double_microbatches`` twice the microbatches at half the size: a structural change, so it
                        is replayed on a model of the pipeline schedule (per-stage forward
                        and backward times per microbatch) with ``m`` and ``2m`` microbatches,
                        and the ratio is applied to the measured pipeline span.
``overlap_collectives`` the transfer part of every collective takes no time (waiting for a
                        late member still does).
``double_bandwidth``    every collective and point-to-point transfer takes half as long.
``on_time_start``       a rank that begins its step later than the median rank (clocks
                        aligned) begins it with the median rank: the host time at the
                        start of its window, as long as its lateness, is deleted, so every
                        launch after it comes that much earlier.
``balanced_batches``    op-level timelines: within each step, every op of a type on a stage's
                        data-parallel replicas takes the mean of that type over the stage's
                        replicas and microbatches (sequence packing or length bucketing
                        gives every replica and microbatch the same work); a rank that is
                        slower in every step (a slow GPU, :meth:`JobModel.slow_ranks`) keeps
                        its speed.
``no_variation``        op-level timelines: the job without stragglers, the bound the fixes
                        are measured against -- every compute op at the mean of its type over
                        ranks, stages and steps, every communication op's transfer at the
                        median of its type (the definition of the published what-if
                        simulator's "ideal" timeline).

A what-if that does not apply to the job (nothing to remove, no peers, no pipeline) is not
replayed. Pure: the summaries are only read.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import (
    BLOCK_ALLOC,
    BLOCK_COPY,
    BLOCK_SYNC,
    EV_COLLECTIVE,
    EV_COMPUTE,
    EV_COPY,
    EV_P2P,
    RankGraph,
)
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.replay import Group, JobReplay, ReplayPlan, WhatIf, replay_job
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.table import Table
from gpuprof.model.timeline import CopyKind

FloatArray = npt.NDArray[np.float64]

WHATIFS: Mapping[str, str] = {
    "no_dataloader": "the DataLoader waits cost nothing",
    "no_sync": "no blocking host-device syncs (the host runs ahead)",
    "free_launches": "the operators that launch kernels cost no host time (CUDA graphs / torch.compile)",
    "free_launch_calls": "the kernel launch calls cost no host time",
    "free_host": "the host's own work between launches (Python, framework) costs nothing",
    "no_allocator": "no device allocator calls",
    "no_ddp_buffer_sync": "no DDP buffer broadcast at each forward",
    "pinned_copies": "pageable copies made asynchronous and hidden behind compute",
    "hidden_copies": "the other copies and memsets hidden behind compute",
    "peer_median_compute": "every rank computes no slower than the median of the ranks that do the same work",
    "balanced_stages": "the pipeline's compute spread evenly over its stages",
    "double_microbatches": "twice the microbatches at half the size",
    "overlap_collectives": "collective transfers fully hidden behind compute",
    "double_bandwidth": "communication transfers twice as fast",
    "on_time_start": "every rank begins its step with the median rank",
    "balanced_batches": "every replica and microbatch of a step carries the same work (sequence packing, length bucketing)",
    "no_variation": "the job without stragglers: every op at its type's mean (compute) or median (transfers)",
}
# What-ifs that bound the others rather than stand for a fix a user makes.
BOUNDS: frozenset[str] = frozenset({"no_variation"})
# The fixes that even out the work (what the no_variation bound is the limit of).
EVENING: tuple[str, ...] = ("peer_median_compute", "balanced_stages", "balanced_batches")

# Host what-ifs: which removable host time they delete and which blocking tags they free.
_HOST: Mapping[str, tuple[str, tuple[int, ...]]] = {
    "no_dataloader": ("dataloader", ()),
    "no_sync": ("sync", (BLOCK_SYNC,)),
    "free_launches": ("operators", ()),
    "free_launch_calls": ("launch", ()),
    "free_host": ("host_work", ()),
    "no_allocator": ("allocator", (BLOCK_ALLOC,)),
    "no_ddp_buffer_sync": ("ddp_buffers", ()),
    "pinned_copies": ("blocking_copies", (BLOCK_COPY,)),
}
# What-ifs that take copies off the critical path (see JobModel.copy_floor_us).
_HIDES_COPIES = frozenset({"pinned_copies", "hidden_copies"})
# A rank whose compute per step is this many times the median of its same-work peers is
# slow for a reason of its own (a slow GPU, clocks, node, or more data), not its layers.
SLOW_RANK_RATIO = 1.15
# Start instants of op-level timer ops within this long of each other are one barrier.
SYNC_TOL_US = 20.0
# Point-to-point calls of two ranks ending within this long of each other are one transfer.
P2P_END_TOL_US = 20.0


@dataclass(frozen=True)
class PipelineShape:
    """What the schedule model of ``double_microbatches`` needs: ``p`` stages, ``m``
    microbatches, ``v`` chunks, ``schedule``, per-stage forward/backward time per
    microbatch (microseconds), the transfer time between stages and the measured span."""

    p: int
    m: int
    v: int
    schedule: str
    forward_us: tuple[float, ...]
    backward_us: tuple[float, ...]
    transfer_us: float
    span_us: float
    # Pipeline-bubble time per step of the bottleneck rank (the most compute per step):
    # the fill and drain it sits through, which twice the microbatches halve.
    bottleneck_bubble_us: float | None = None


@dataclass(frozen=True)
class JobModel:
    """The job's graph: per-rank graphs, the groups that couple them, clock offsets, and
    what the duration-changing what-ifs need (peer groups, stages, compute per step)."""

    graphs: tuple[RankGraph, ...]
    groups: tuple[Group, ...]
    offsets_us: Mapping[int, float]
    measured_step_us: float
    peers: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    stage_of: Mapping[int, int] = field(default_factory=dict)
    compute_us_per_step: Mapping[int, float] = field(default_factory=dict)
    pipeline: PipelineShape | None = None
    # Per rank: each graph event's step index, and the compute time of each step; the same
    # by segment (the work between consecutive collectives of the rank's groups).
    step_of_event: Mapping[int, npt.NDArray[np.int64]] = field(default_factory=dict)
    compute_by_step: Mapping[int, FloatArray] = field(default_factory=dict)
    segment_of_event: Mapping[int, npt.NDArray[np.int64]] = field(default_factory=dict)
    compute_by_segment: Mapping[int, FloatArray] = field(default_factory=dict)
    # Per rank that begins its steps later than the median rank (aligned clocks): by how
    # much, microseconds (ranks whose host launches its work only).
    late_start_us: Mapping[int, float] = field(default_factory=dict)
    # What every replay of this job shares, built at the first replay.
    _plan: list[ReplayPlan] = field(default_factory=list, compare=False, repr=False)
    # Derived tables that several what-ifs read (the peer factors), built at first use.
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def applicable(self) -> list[str]:
        """The what-ifs that change something in this job."""
        out: list[str] = []
        for name, (key, _) in _HOST.items():
            if any(iv.total(g.removable.get(key, iv.empty())) > 0 for g in self.graphs):
                out.append(name)
        for g in self.graphs:
            copies = g.kind == EV_COPY
            pageable = g.pageable if g.pageable is not None else np.zeros(g.n_events, dtype=bool)
            if (copies & pageable).any() and "pinned_copies" not in out:
                out.append("pinned_copies")
            if (copies & ~pageable).any() and "hidden_copies" not in out:
                out.append("hidden_copies")
        if any(float(np.min(f)) < 0.999 for f in self._peer_factors().values() if f.size):
            out.append("peer_median_compute")
        if len(set(self.stage_of.values())) >= 2 and any(abs(f - 1.0) > 1e-3 for f in self._stage_factors().values()):
            out.append("balanced_stages")
        if self.pipeline is not None and self.pipeline.p > 1:
            out.append("double_microbatches")
        kinds = np.concatenate([g.kind for g in self.graphs]) if self.graphs else np.zeros(0)
        if np.isin(kinds, (1, 2)).any():
            if (kinds == 1).any():
                out.append("overlap_collectives")
            out.append("double_bandwidth")
        if self.late_start_us:
            out.append("on_time_start")
        for name, factors in (("balanced_batches", self._batch_factors()), ("no_variation", self._variation_factors())):
            if any(f.size and float(np.max(np.abs(f - 1.0))) > 1e-3 for f in factors.values()):
                out.append(name)
        return out

    def _work_groups(self) -> dict[int, int]:
        """Each rank's same-work group (its stage's replicas), numbered by its lowest rank."""
        out: dict[int, int] = {}
        for members in {tuple(sorted(v)) for v in self.peers.values()}:
            for r in members:
                out[r] = min(members)
        return out

    def op_variation(self) -> dict[str, tuple[float, float, int]]:
        """Op-level timelines: per compute op type, its mean duration (us), its coefficient
        of variation among the ranks that do the same work (the median over stages: a heavier
        stage is not variation) and how many ops."""
        groups = self._work_groups()
        parts: dict[tuple[str, int], list[FloatArray]] = {}
        for g in self._named_graphs():
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

    def heavy_ranks(self, margin: float = 0.01) -> list[int]:
        """Ranks that computed more than their same-work group's mean (by ``margin``) in
        some step: where ``balanced_batches`` takes work away."""
        groups = self._work_groups()
        members: dict[int, list[int]] = {}
        for r, grp in groups.items():
            if r in self.compute_by_step:
                members.setdefault(grp, []).append(r)
        out: set[int] = set()
        for ranks in members.values():
            if len(ranks) < 2:
                continue
            steps = min(int(self.compute_by_step[r].size) for r in ranks)
            table = np.vstack([self.compute_by_step[r][:steps] for r in ranks])
            mean = table.mean(axis=0)
            heavy = (table > mean * (1.0 + margin)) & (mean > 0)
            out.update(r for r, row in zip(ranks, heavy) if row.any())
        return sorted(out)

    def slowest_per_step(self) -> dict[int, list[int]]:
        """Per same-work group (numbered by its lowest rank) with two or more ranks, the rank
        with the most compute in each step."""
        out: dict[int, list[int]] = {}
        groups = self._work_groups()
        members: dict[int, list[int]] = {}
        for r, grp in groups.items():
            if r in self.compute_by_step:
                members.setdefault(grp, []).append(r)
        for grp, ranks in members.items():
            if len(ranks) < 2:
                continue
            steps = min(int(self.compute_by_step[r].size) for r in ranks)
            out[grp] = [max(ranks, key=lambda r: float(self.compute_by_step[r][t])) for t in range(steps)]
        return out

    def _named_graphs(self) -> list[RankGraph]:
        """The graphs whose events carry op names (op-level timelines); the op-type
        what-ifs apply only when every rank's does."""
        named = [g for g in self.graphs if g.name_idx is not None and g.names]
        return named if len(named) == len(self.graphs) else []

    def _variation_factors(self) -> dict[int, FloatArray]:
        """``no_variation``: per rank, each event's factor to the mean duration of its op
        type over every rank and step (compute) or to the median (communication)."""
        graphs = self._named_graphs()
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

    def _batch_factors(self) -> dict[int, FloatArray]:
        """``balanced_batches``: per rank, each compute event's factor to the mean duration
        of its op type over its stage's replicas (its same-work peers) and microbatches in
        the same step; a persistently slow rank keeps its speed."""
        graphs = self._named_graphs()
        if not graphs or not self.peers:
            return {}
        speed = {r: float(x) for r, x in self.slow_ranks().items()}
        group_of = self._work_groups()
        names: dict[str, int] = {}
        rows: list[tuple[FloatArray, ...]] = []
        for g in graphs:
            if g.rank not in group_of or g.rank not in self.step_of_event:
                continue
            assert g.name_idx is not None
            code = np.array([names.setdefault(n, len(names)) for n in g.names], dtype=np.int64)[g.name_idx]
            comp = g.kind == EV_COMPUTE
            sp = speed.get(g.rank, 1.0)
            step = self.step_of_event[g.rank]
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

    def copy_floor_us(self) -> float:
        """The shortest step a job whose copies are all hidden behind compute can have: the
        copy engine of each direction still carries that direction's copies (pinned ones
        for their measured time; pageable ones, whose measured time includes the driver's
        staging, for none), so no rank's step is shorter than its busiest direction."""
        best = 0.0
        for g in self.graphs:
            if g.copy_kind is None or g.n_events == 0:
                continue
            steps = max(int(self.compute_by_step[g.rank].size) if g.rank in self.compute_by_step else 1, 1)
            pinned = ~g.pageable if g.pageable is not None else np.ones(g.n_events, dtype=bool)
            for direction in (CopyKind.HTOD, CopyKind.DTOH):
                sel = (g.copy_kind == int(direction)) & pinned
                if sel.any():
                    busy = iv.total(iv.union(g.start[sel], g.start[sel] + g.dur[sel]))
                    best = max(best, busy / steps)
        return best

    def _peer_factors(self) -> dict[int, FloatArray]:
        """Per rank, a factor for each of its events: its compute in each *segment* (the
        work between two consecutive collectives, which every data-parallel peer runs alike)
        scaled to the median of its peers' compute in that segment, never above 1 -- a slow
        GPU is slow in every segment, data-dependent imbalance (a longer rollout, a longer
        sequence) in some. Peers with a different sequence of collectives are compared step
        by step, and on their means when even their step counts differ. Ranks with nothing
        to scale are left out. The peers' median is worked out once per group of peers (every
        member of a group has the same peers), and the result once per model."""
        cached = self._cache.get("peer_factors")
        if cached is not None:
            return dict(cached)
        out: dict[int, FloatArray] = {}
        medians: dict[tuple[int, tuple[int, ...]], FloatArray | None] = {}
        tables = ((self.segment_of_event, self.compute_by_segment), (self.step_of_event, self.compute_by_step))
        for r, peers in self.peers.items():
            for which, (index, table) in enumerate(tables):
                mine = table.get(r)
                key = (which, tuple(peers))
                if key not in medians:
                    rows = [table[q] for q in peers if q in table]
                    size = rows[0].size if rows else 0
                    ok = len(rows) >= 2 and size > 0 and all(x.size == size for x in rows)
                    medians[key] = np.median(np.vstack(rows), axis=0) if ok else None
                med_or_none = medians[key]
                if mine is None or med_or_none is None or mine.size != med_or_none.size:
                    continue
                med = med_or_none
                f = np.where(mine > 0, np.minimum(1.0, med / np.where(mine > 0, mine, 1.0)), 1.0)
                out[r] = f[np.clip(index[r], 0, f.size - 1)]
                break
            else:
                vals = [self.compute_us_per_step[q] for q in peers if q in self.compute_us_per_step]
                c = self.compute_us_per_step.get(r) or 0.0
                if len(vals) >= 2 and c > 0 and r in self.step_of_event:
                    out[r] = np.full(self.step_of_event[r].size, min(1.0, float(np.median(vals)) / c))
        self._cache["peer_factors"] = out
        return dict(out)

    def slow_ranks(self) -> dict[int, float]:
        """Ranks computing at least :data:`SLOW_RANK_RATIO` times the median of their
        same-work peers (the other ranks doing the same work), with that ratio."""
        out: dict[int, float] = {}
        for r, peers in self.peers.items():
            others = [self.compute_us_per_step[q] for q in peers if q != r and q in self.compute_us_per_step]
            mine = self.compute_us_per_step.get(r)
            if not others or not mine:
                continue
            med = float(np.median(others))
            if med > 0 and mine / med >= SLOW_RANK_RATIO:
                out[r] = mine / med
        return out

    def _stage_factors(self, base: Mapping[int, float] | None = None) -> dict[int, float]:
        """Per rank, the scale that brings its stage's compute to the mean over stages
        (``base``: compute per step after an earlier change, e.g. the peer fix)."""
        comp = dict(self.compute_us_per_step) if base is None else dict(base)
        per_stage: dict[int, list[float]] = {}
        for r, st in self.stage_of.items():
            if r in comp:
                per_stage.setdefault(st, []).append(comp[r])
        if len(per_stage) < 2:
            return {}
        # A stage's time is its replicas' median: one slow replica is a slow rank (the peer
        # fix), not a heavier stage.
        stage_t = {st: float(np.median(v)) for st, v in per_stage.items()}
        mean = float(np.mean(list(stage_t.values())))
        return {r: mean / stage_t[st] for r, st in self.stage_of.items() if r in comp and stage_t[st] > 0}

    def whatif(self, names: Iterable[str]) -> WhatIf:
        """One change combining ``names`` (``double_microbatches`` is not a graph change)."""
        names = list(names)
        removed: dict[int, Intervals] = {}
        unblock: set[int] = set()
        for name in names:
            if name not in _HOST:
                continue
            key, tags = _HOST[name]
            unblock.update(tags)
            for g in self.graphs:
                rem = g.removable.get(key)
                if rem is None or rem[0].size == 0:
                    continue
                prev = removed.get(g.rank)
                removed[g.rank] = (
                    rem
                    if prev is None
                    else iv.union(np.concatenate((prev[0], rem[0])), np.concatenate((prev[1], rem[1])))
                )
        # Duration factors of compute (and, for no_variation, communication) events, in
        # order: the op-type what-ifs, then the slow ranks at their peers' median (with
        # balanced batches only the persistently slow ranks: the batches already even out
        # the rest), then the stages at their mean, on the compute the earlier ones leave.
        if "on_time_start" in names:
            for r, late in self.late_start_us.items():
                lead = (np.array([0.0]), np.array([late]))
                prev = removed.get(r)
                removed[r] = lead if prev is None else iv.union(
                    np.concatenate((prev[0], lead[0])), np.concatenate((prev[1], lead[1]))
                )
        per_event: dict[int, FloatArray] = {}
        for name, table_of in (("balanced_batches", self._batch_factors), ("no_variation", self._variation_factors)):
            if name in names:
                for r, f in table_of().items():
                    per_event[r] = per_event[r] * f if r in per_event else f
        if "peer_median_compute" in names:
            keep = set(self.slow_ranks()) if "balanced_batches" in names else None
            graphs_by_rank = {g.rank: g for g in self.graphs}
            for r, f in self._peer_factors().items():
                if keep is not None and r not in keep:
                    continue
                pg = graphs_by_rank.get(r)
                if pg is None or f.size != pg.n_events:
                    continue
                f = np.where(pg.kind == EV_COMPUTE, f, 1.0)
                per_event[r] = per_event[r] * f if r in per_event else f
        factor: dict[int, float] = {}
        if "balanced_stages" in names:
            after = dict(self.compute_us_per_step)
            for g in self.graphs:
                if g.rank in per_event and g.rank in after:
                    comp = g.kind == EV_COMPUTE
                    steps = max(int(self.compute_by_step[g.rank].size), 1)
                    after[g.rank] = float(np.sum(g.dur[comp] * per_event[g.rank][comp])) / steps
            factor = self._stage_factors(after)
        scale: dict[int, FloatArray] = {}
        for g in self.graphs:
            f_ev = np.ones(g.n_events)
            compute = g.kind == EV_COMPUTE
            got = per_event.get(g.rank)
            if got is not None and got.size == g.n_events:
                f_ev = got.copy()
            fr = factor.get(g.rank)
            if fr is not None and abs(fr - 1.0) > 1e-9:
                f_ev = np.where(compute, f_ev * fr, f_ev)
            copies = g.kind == EV_COPY
            pageable = g.pageable if g.pageable is not None else np.zeros(g.n_events, dtype=bool)
            if "pinned_copies" in names:
                f_ev = np.where(copies & pageable, 0.0, f_ev)
            if "hidden_copies" in names:
                f_ev = np.where(copies & ~pageable, 0.0, f_ev)
            if (f_ev != 1.0).any():
                scale[g.rank] = f_ev
        transfer = 1.0
        p2p = 1.0
        if "double_bandwidth" in names:
            transfer = p2p = 0.5
        if "overlap_collectives" in names:
            transfer = 0.0
        return WhatIf(
            name="+".join(names),
            removed=removed,
            unblock=frozenset(unblock),
            scale=scale,
            transfer_scale=transfer,
            p2p_scale=p2p,
        )

    def on_time_pct(self, ranks: Iterable[int], baseline_step_us: float) -> float | None:
        """What ``on_time_start`` saves with only ``ranks`` (of the late ones) on time,
        percent of the measured step (``None``: none of them starts late)."""
        late = {r: self.late_start_us[r] for r in ranks if r in self.late_start_us}
        if not late or self.measured_step_us <= 0:
            return None
        got = replace(self, late_start_us=late, _plan=[], _cache={}).replay(["on_time_start"])
        return min(100.0, max(0.0, 100.0 * (baseline_step_us - got.step_us) / self.measured_step_us))

    def replay(self, names: Iterable[str] = ()) -> JobReplay:
        if not self._plan:
            self._plan.append(ReplayPlan(self.graphs, self.groups, self.offsets_us))
        return replay_job(self.graphs, self.groups, self.offsets_us, self.whatif(names), plan=self._plan[0])

    def microbatch_saving_us(self, balanced: bool = False, capped: bool = True) -> float:
        """Per step, what twice the microbatches at half the size saves (``balanced``: with
        the stages' compute evened out first). Two models bound it and the tighter is
        taken: the schedule model (per-stage forward and backward times, ``m`` against
        ``2m`` microbatches, scaled to the measured span), which assumes a microbatch of
        half the size takes half the time and sees nothing outside the pipeline; and half
        the fill and drain the bottleneck rank sat through (its measured bubble), which
        leaves the per-transfer latencies that do not shrink in."""
        pl = self.pipeline
        if pl is None or pl.p < 2 or pl.m < 1:
            return 0.0
        f, b = list(pl.forward_us), list(pl.backward_us)
        if balanced:
            f = [float(np.mean(f))] * len(f)
            b = [float(np.mean(b))] * len(b)
        now = schedule_span_us(pl.forward_us, pl.backward_us, pl.m * pl.v, pl.schedule, pl.transfer_us, pl.v)
        if now <= 0:
            return 0.0
        ref = schedule_span_us(f, b, pl.m * pl.v, pl.schedule, pl.transfer_us, pl.v)
        half = schedule_span_us([x / 2 for x in f], [x / 2 for x in b], 2 * pl.m * pl.v, pl.schedule, pl.transfer_us, pl.v)
        model = max(0.0, pl.span_us * (ref - half) / now)
        if pl.bottleneck_bubble_us is not None and not balanced and capped:
            model = min(model, 0.5 * pl.bottleneck_bubble_us)
        return model


def schedule_span_us(
    forward_us: Sequence[float],
    backward_us: Sequence[float],
    microbatches: int,
    schedule: str,
    transfer_us: float = 0.0,
    chunks: int = 1,
) -> float:
    """Makespan of one pipeline step on a schedule model: stage ``s`` runs its microbatches'
    forward (``forward_us[s]``) and backward (``backward_us[s]``) passes in the order of
    ``schedule`` (GPipe: every forward, then every backward; 1F1B: ``p-s-1`` warm-up
    forwards, then one forward one backward, then the rest of the backwards; an interleaved
    schedule is modelled as 1F1B over ``chunks`` times as many microbatches of ``1/chunks``
    the work, the same bubble), a forward waiting for the previous stage's forward of that
    microbatch and a backward for the next stage's backward, ``transfer_us`` between stages."""
    p = len(forward_us)
    m = microbatches
    if p == 0 or m <= 0:
        return 0.0
    fw = [float(x) / chunks for x in forward_us] if chunks > 1 else [float(x) for x in forward_us]
    bw = [float(x) / chunks for x in backward_us] if chunks > 1 else [float(x) for x in backward_us]
    orders: list[list[tuple[str, int]]] = []
    for s in range(p):
        if schedule == "gpipe":
            order = [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
        else:
            warm = min(p - s - 1, m)
            order = [("F", j) for j in range(warm)]
            nf, nb = warm, 0
            while nf < m or nb < m:
                if nf < m:
                    order.append(("F", nf))
                    nf += 1
                if nb < m:
                    order.append(("B", nb))
                    nb += 1
        orders.append(order)
    done: dict[tuple[str, int, int], float] = {}
    pos = [0] * p
    free = [0.0] * p
    remaining = sum(len(o) for o in orders)
    while remaining:
        moved = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                kind, j = orders[s][pos[s]]
                if kind == "F":
                    dep = done.get(("F", s - 1, j), None) if s > 0 else 0.0
                    need = None if dep is None else dep + (transfer_us if s > 0 else 0.0)
                    dur = fw[s]
                else:
                    if s == p - 1:
                        dep = done.get(("F", s, j))
                        need = dep
                    else:
                        dep = done.get(("B", s + 1, j))
                        need = None if dep is None else dep + transfer_us
                    dur = bw[s]
                if need is None:
                    break
                start = max(free[s], need)
                free[s] = start + dur
                done[(kind, s, j)] = free[s]
                pos[s] += 1
                remaining -= 1
                moved = True
        if not moved:  # an order the model cannot run (should not happen)
            return 0.0
    return max(free)


# --- building the model ---------------------------------------------------------------


def _graph_index(g: RankGraph) -> dict[int, int]:
    """``comms`` row -> event index of the graph."""
    rows = np.flatnonzero(g.comm_row >= 0)
    return {int(g.comm_row[i]): int(i) for i in rows}


def _as_str(table: Table, column: str) -> np.ndarray:
    """A column of a comms table as strings (an object array; empty for an empty table)."""
    if len(table) == 0:
        return np.empty(0, dtype=object)
    out = np.empty(len(table), dtype=object)
    out[:] = [str(v) for v in table[column].tolist()]
    return out


def _collective_groups(summaries: Sequence[RankSummary], matched: Any, offsets: Mapping[int, float]) -> list[Group]:
    if matched is None:
        return []
    table = getattr(matched, "calls_table", None)  # numpy columns, without pandas
    calls = table if table is not None else matched.calls
    if calls is None or len(calls) == 0 or "row" not in calls:
        return []
    index = {s.rank: _graph_index(s.graph) for s in summaries if s.graph is not None}
    graphs = {s.rank: s.graph for s in summaries if s.graph is not None}
    out: list[Group] = []
    ranks = np.asarray(calls["rank"])
    rows = np.asarray(calls["row"])
    keys = np.asarray(calls["key"])
    order = np.argsort(keys, kind="stable")
    cut = np.flatnonzero(np.diff(keys[order])) + 1
    for idx in np.split(order, cut):
        members = []
        starts = []
        for i in idx.tolist():
            r = int(ranks[i])
            ev = index.get(r, {}).get(int(rows[i]))
            if ev is None:
                continue
            g = graphs[r]
            members.append((r, ev))
            starts.append(float(g.start[ev]) + g.lo_us - offsets.get(r, 0.0))
        if len(members) < 2:
            continue
        timeline = all(graphs[r].timeline for r, _ in members)
        together = max(starts) - min(starts) <= SYNC_TOL_US
        out.append(Group(tuple(members), "barrier" if timeline and together else "collective"))
    return out


def _direction(name: str) -> tuple[str, str]:
    """(``send``/``recv``/``""``, ``forward``/``backward``/``""``) from a p2p op's name."""
    low = name.lower()
    way = "send" if "send" in low else "recv" if "recv" in low else ""
    phase = "forward" if "forward" in low else "backward" if "backward" in low else ""
    return way, phase


def _p2p_groups(summaries: Sequence[RankSummary], offsets: Mapping[int, float], stage_of: Mapping[int, int]) -> list[Group]:
    """Point-to-point transfers across ranks.

    Op-level timers (a ``forward-recv`` waiting for a ``forward-send``): each receive is
    paired with a send of an adjacent stage (the same data-parallel replica where the layout
    says, the same direction where the names say) that starts while the receive's timer
    runs, within :data:`SYNC_TOL_US`; the pair is replayed as a barrier, each op keeping its
    measured offset from the other (a receive timed behind a barrier starts with the send; a
    receive posted just before the data arrives keeps that lead). Kineto kernels: a send and
    a receive on different ranks whose ends (on the common clock) fall within
    :data:`P2P_END_TOL_US` of each other."""
    Row = tuple[float, float, int, int, int, str, str]  # start, end, rank, event, dp, way, phase
    timeline: list[Row] = []
    kineto: list[Row] = []
    pgs: dict[tuple[int, int], str] = {}
    # The rank at the other end of a call, where the trace names it (nccl:send a->b).
    peer_of: dict[tuple[int, int], int] = {}
    for s in summaries:
        g = s.graph
        if g is None:
            continue
        off = offsets.get(s.rank, 0.0)
        comms = s.comms_table
        peers = np.asarray(comms["peer"]) if len(comms) else np.empty(0, dtype=np.int64)
        names = _as_str(comms, "name")
        colls = _as_str(comms, "coll_name")
        groups = _as_str(comms, "pg")
        for i in np.flatnonzero(g.kind == EV_P2P).tolist():
            row = int(g.comm_row[i])
            way, phase = _direction(str(names[row])) if 0 <= row < names.size else ("", "")
            if 0 <= row < colls.size and str(colls[row]) in ("send", "recv"):
                way = str(colls[row])
            pgs[(s.rank, i)] = str(groups[row]) if 0 <= row < groups.size else ""
            if 0 <= row < peers.size and peers[row] >= 0:
                peer_of[(s.rank, i)] = int(peers[row])
            item: Row = (
                float(g.start[i]) + g.lo_us - off,
                float(g.start[i] + g.dur[i]) + g.lo_us - off,
                s.rank,
                i,
                int(s.parallel.get("dp_rank", -1)),
                way,
                phase,
            )
            (timeline if g.timeline else kineto).append(item)

    def neighbours(a: Row, b: Row) -> bool:
        if a[2] == b[2] or (a[4] >= 0 and b[4] >= 0 and a[4] != b[4]):
            return False
        if a[2] in stage_of and b[2] in stage_of:
            # Adjacent stages (or the last and the first: an interleaved schedule wraps).
            d = abs(stage_of[a[2]] - stage_of[b[2]])
            return d == 1 or (d > 1 and d == max(stage_of.values()) - min(stage_of.values()))
        return True

    out: list[Group] = []
    sends = sorted((r for r in timeline if r[5] != "recv"), key=lambda r: r[0])
    send_starts = [r[0] for r in sends]
    used: set[tuple[int, int]] = set()
    for rv in sorted((r for r in timeline if r[5] == "recv"), key=lambda r: r[0]):
        lo_i = bisect_left(send_starts, rv[0] - SYNC_TOL_US)
        hi_i = bisect_right(send_starts, rv[1] + SYNC_TOL_US)
        best: Row | None = None
        for sd in sends[lo_i:hi_i]:
            if (sd[2], sd[3]) in used or not neighbours(rv, sd):
                continue
            if rv[6] and sd[6] and rv[6] != sd[6]:
                continue
            if best is None or abs(sd[0] - rv[0]) < abs(best[0] - rv[0]):
                best = sd
        if best is not None:
            used.add((best[2], best[3]))
            out.append(Group(((rv[2], rv[3]), (best[2], best[3])), "p2p"))
    out.extend(_kineto_p2p_pairs(kineto, neighbours, pgs, peer_of))
    return out


def _kineto_p2p_pairs(
    rows: Sequence[tuple[float, float, int, int, int, str, str]],
    neighbours: Any,
    pgs: Mapping[tuple[int, int], str],
    peer_of: Mapping[tuple[int, int], int] | None = None,
) -> list[Group]:
    """Sends paired with receives on neighbouring ranks of the same process group.

    First the transfers both sides waited through: a send and a receive whose ends (on the
    common clock) fall within :data:`P2P_END_TOL_US`, nearest first. Then every receive
    left (it started after its data had arrived, a buffered send) takes the latest unpaired
    send of a neighbour that ended by its end, one way (an ``after`` group of the replay):
    in a what-if where that send comes later, the receive waits for it; the send never
    waits for the receive. Directions come from the profiler's collective name (``send`` /
    ``recv``) where it has one; without it any two calls may pair."""
    out: list[Group] = []
    used: set[tuple[int, int]] = set()
    peers = peer_of or {}

    def compatible(a: tuple[float, float, int, int, int, str, str], b: tuple[float, float, int, int, int, str, str]) -> bool:
        if not neighbours(a, b) or pgs.get((a[2], a[3]), "") != pgs.get((b[2], b[3]), ""):
            return False
        # Where the trace names the other end of a call, only that rank's call can pair.
        if peers.get((a[2], a[3]), b[2]) != b[2] or peers.get((b[2], b[3]), a[2]) != a[2]:
            return False
        return not (a[5] and b[5] and a[5] == b[5])

    by_end = sorted(rows, key=lambda r: r[1])
    ends = [r[1] for r in by_end]
    cands: list[tuple[float, int, int]] = []
    for i, a in enumerate(by_end):
        j = bisect_left(ends, a[1] - P2P_END_TOL_US)
        for k in range(j, len(by_end)):
            b = by_end[k]
            if b[1] > a[1] + P2P_END_TOL_US:
                break
            if k > i and compatible(a, b):
                cands.append((abs(b[1] - a[1]), i, k))
    for _, i, k in sorted(cands):
        a, b = by_end[i], by_end[k]
        if (a[2], a[3]) in used or (b[2], b[3]) in used:
            continue
        used.update({(a[2], a[3]), (b[2], b[3])})
        out.append(Group(((a[2], a[3]), (b[2], b[3])), "collective"))
    # The receives that did not wait, one way behind their buffered sends.
    sends = [r for r in by_end if r[5] != "recv" and (r[2], r[3]) not in used]
    for rv in (r for r in by_end if r[5] == "recv" and (r[2], r[3]) not in used):
        best = None
        for sd in sends:
            if sd[1] > rv[1] + P2P_END_TOL_US:
                break
            if (sd[2], sd[3]) not in used and compatible(rv, sd):
                best = sd
        if best is not None:
            used.update({(rv[2], rv[3]), (best[2], best[3])})
            out.append(Group(((rv[2], rv[3]), (best[2], best[3])), "after"))
    return out


def _barrier_groups(summaries: Sequence[RankSummary], points_us: Sequence[float], offsets: Mapping[int, float], taken: set[tuple[int, int]]) -> list[Group]:
    """Ops that start at a barrier of an op-level timeline, one per rank and barrier: the
    same op on every rank (a barrier before a timer starts the same op everywhere; ops of
    different names starting together are a coincidence of the schedule)."""
    out: list[Group] = []
    graphs = [s.graph for s in summaries if s.graph is not None and s.graph.timeline]
    for p in points_us:
        members = []
        names = set()
        for g in graphs:
            t = p + offsets.get(g.rank, 0.0) - g.lo_us
            near = np.flatnonzero(np.abs(g.start - t) <= SYNC_TOL_US)
            for i in near.tolist():
                if (g.rank, i) not in taken:
                    members.append((g.rank, i))
                    if g.name_idx is not None:
                        names.add(g.names[int(g.name_idx[i])])
                    break
        if len({r for r, _ in members}) >= 2 and len(names) <= 1:
            out.append(Group(tuple(members), "barrier"))
            taken.update(members)
    return out


def _peers(summaries: Sequence[RankSummary], stage_of: Mapping[int, int]) -> dict[int, tuple[int, ...]]:
    """Same-work peers: the same pipeline stage (on every data-parallel replica), the same
    (pipeline, tensor) position of an op-level timeline, else every rank."""
    ranks = [s.rank for s in summaries if s.graph is not None]
    if stage_of:
        by: dict[Any, list[int]] = {}
        for r in ranks:
            by.setdefault(stage_of.get(r, -1), []).append(r)
    elif all("pp_rank" in s.parallel or "tp_rank" in s.parallel for s in summaries if s.graph is not None):
        by = {}
        for s in summaries:
            if s.graph is not None:
                by.setdefault((s.parallel.get("pp_rank", -1), s.parallel.get("tp_rank", -1)), []).append(s.rank)
    else:
        by = {0: ranks}
    return {r: tuple(members) for members in by.values() for r in members}


def _pipeline_shape(
    pipe: Mapping[str, Any] | None, summaries: Sequence[RankSummary], bubble_us_per_step: Mapping[int, float]
) -> PipelineShape | None:
    if not pipe:
        return None
    m = pipe.get("microbatches")
    p = int(pipe.get("stages") or 0)
    span = pipe.get("span_us")
    rows = sorted(pipe.get("per_stage", []), key=lambda r: r["stage"])
    if not m or p < 2 or not span or len(rows) != p:
        return None
    f: list[float] = []
    b: list[float] = []
    for row in rows:
        if "forward_per_microbatch_us" in row:
            f.append(float(row["forward_per_microbatch_us"]))
            b.append(float(row["backward_per_microbatch_us"]))
        elif "compute_per_microbatch_us" in row:
            c = float(row["compute_per_microbatch_us"])
            f.append(c / 3.0)
            b.append(2.0 * c / 3.0)
        else:
            return None
    p2p = [
        float(d)
        for s in summaries
        if s.graph is not None
        for d in s.graph.dur[s.graph.kind == EV_P2P].tolist()
    ]
    transfer = float(np.median(p2p)) if p2p else 0.0
    return PipelineShape(
        p=p,
        m=int(m),
        v=int(pipe.get("chunks") or 1),
        schedule=str(pipe.get("schedule") or "1f1b"),
        forward_us=tuple(f),
        backward_us=tuple(b),
        transfer_us=min(transfer, 0.1 * float(np.median(f + b))),
        span_us=float(span),
        bottleneck_bubble_us=_bottleneck_bubble(summaries, bubble_us_per_step),
    )


def _bottleneck_bubble(summaries: Sequence[RankSummary], bubble_us_per_step: Mapping[int, float]) -> float | None:
    """The pipeline-bubble time per step of the rank with the most compute per step."""
    ranks = [s for s in summaries if s.rank in bubble_us_per_step]
    if not ranks:
        return None
    top = max(ranks, key=lambda s: iv.total(s.compute) / max(len(s.steps), 1))
    return float(bubble_us_per_step[top.rank])


def _step_index(g: RankGraph) -> npt.NDArray[np.int64]:
    """Each event's step: by its start against the step boundaries (0 = first step)."""
    if g.stitched is not None:
        return np.maximum(np.searchsorted(g.stitched[0], g.start, side="right") - 1, 0).astype(np.int64)
    return np.searchsorted(g.edges[1], g.start, side="right").astype(np.int64)


def _segment_index(graphs: Mapping[int, RankGraph], groups: Sequence[Group]) -> dict[int, npt.NDArray[np.int64]]:
    """Each event's segment: how many of the rank's collectives (members of a collective
    group, or of a barrier group of an op-level timeline's collective) started before it."""
    starts: dict[int, list[float]] = {r: [] for r in graphs}
    for grp in groups:
        if grp.kind == "after":
            continue
        for r, i in grp.members:
            g = graphs.get(r)
            if g is not None and int(g.kind[i]) == EV_COLLECTIVE:
                starts[r].append(float(g.start[i]))
    return {
        r: np.searchsorted(np.sort(np.asarray(starts[r], dtype=np.float64)), g.start, side="right").astype(np.int64)
        for r, g in graphs.items()
    }


def _compute_by_index(g: RankGraph, idx: npt.NDArray[np.int64]) -> FloatArray:
    n = int(idx.max()) + 1 if idx.size else 1
    compute = g.kind == EV_COMPUTE
    return np.bincount(idx[compute], weights=g.dur[compute], minlength=n).astype(np.float64)


def _compute_by_step(g: RankGraph, idx: npt.NDArray[np.int64]) -> FloatArray:
    n = int(g.stitched[0].size) if g.stitched is not None else int(g.edges.shape[1]) + 1
    compute = g.kind == EV_COMPUTE
    return np.bincount(np.minimum(idx[compute], n - 1), weights=g.dur[compute], minlength=n).astype(np.float64)


def _step_us(s: RankSummary) -> float:
    return s.window_us / len(s.steps) if s.steps else s.window_us


# A rank "starts late" when its step begins this share of a step after the median rank's.
LATE_START_SHARE = 0.02


def _late_starts(summaries: Sequence[RankSummary], offsets: Mapping[int, float]) -> dict[int, float]:
    """Ranks whose host launches their work and that begin their steps later than the
    median rank (on the aligned clock), by how much (at most the rank's first step)."""
    starts = {
        s.rank: float(np.median([st.start_us for st in s.steps])) - offsets.get(s.rank, 0.0)
        for s in summaries
        if s.steps and s.graph is not None
    }
    if len(starts) < 3:
        return {}
    med = float(np.median(list(starts.values())))
    out: dict[int, float] = {}
    for s in summaries:
        if s.rank not in starts or s.graph is None or not s.graph.removable:
            continue
        late = starts[s.rank] - med
        step = _step_us(s)
        if late > LATE_START_SHARE * step:
            out[s.rank] = min(late, step)
    return out


def build_job_model(
    summaries: Sequence[RankSummary],
    matched: Any = None,
    offsets_us: Mapping[int, float] | None = None,
    stage_of: Mapping[int, int] | None = None,
    pipeline: Mapping[str, Any] | None = None,
    barrier_points_us: Sequence[float] = (),
    bubble_us_per_step: Mapping[int, float] | None = None,
) -> JobModel | None:
    """The job model of the active ranks, or ``None`` when no rank has a graph."""
    active = [s for s in summaries if s.graph is not None and s.window_us > 0]
    if not active:
        return None
    offsets = dict(offsets_us or {})
    stages = dict(stage_of or {})
    groups = _collective_groups(active, matched, offsets)
    groups += _p2p_groups(active, offsets, stages)
    taken = {m for grp in groups for m in grp.members}
    groups += _barrier_groups(active, barrier_points_us, offsets, taken)
    graphs = {s.rank: s.graph for s in active if s.graph is not None}
    steps = {r: _step_index(g) for r, g in graphs.items()}
    segments = _segment_index(graphs, groups)
    return JobModel(
        graphs=tuple(s.graph for s in active if s.graph is not None),
        groups=tuple(groups),
        offsets_us=offsets,
        measured_step_us=max(_step_us(s) for s in active),
        peers=_peers(active, stages),
        stage_of=stages,
        compute_us_per_step={s.rank: iv.total(s.compute) / max(len(s.steps), 1) for s in active},
        pipeline=_pipeline_shape(pipeline, active, bubble_us_per_step or {}),
        step_of_event=steps,
        compute_by_step={r: _compute_by_step(graphs[r], idx) for r, idx in steps.items()},
        segment_of_event=segments,
        compute_by_segment={r: _compute_by_index(graphs[r], idx) for r, idx in segments.items()},
        late_start_us=_late_starts(active, offsets),
    )


@dataclass(frozen=True)
class WhatIfResults:
    """Replayed step times: ``baseline`` (unchanged) and one per applicable what-if."""

    model: JobModel
    baseline: JobReplay
    results: Mapping[str, JobReplay]
    microbatch_saving_us: float = 0.0

    @property
    def model_error_pct(self) -> float:
        m = self.model.measured_step_us
        return 100.0 * (self.baseline.step_us - m) / m if m > 0 else 0.0

    def savings_pct(self, name: str) -> float | None:
        """What ``name`` saves, percent of the measured job step (``None``: not replayed)."""
        m = self.model.measured_step_us
        if m <= 0:
            return None
        if name == "double_microbatches":
            return min(100.0, 100.0 * self.microbatch_saving_us / m) if self.model.pipeline is not None else None
        got = self.results.get(name)
        if got is None:
            return None
        return min(100.0, max(0.0, 100.0 * (self.baseline.step_us - self._bounded(got.step_us, (name,))) / m))

    def _bounded(self, step_us: float, names: Iterable[str]) -> float:
        """A replayed step no shorter than the copies need when a what-if hides them (the
        replay gives hidden copies no time at all)."""
        if any(n in _HIDES_COPIES for n in names):
            return max(step_us, self.model.copy_floor_us())
        return step_us

    def combined_pct(self, names: Iterable[str]) -> float | None:
        """What applying every what-if of ``names`` at once saves, from one replay (bounds
        such as ``no_variation`` are not fixes and are left out)."""
        names = [n for n in names if n in WHATIFS and n not in BOUNDS]
        m = self.model.measured_step_us
        if not names or m <= 0:
            return None
        graph_names = [n for n in names if n != "double_microbatches"]
        step = self.model.replay(graph_names).step_us if graph_names else self.baseline.step_us
        saved = self.baseline.step_us - self._bounded(step, graph_names)
        if "double_microbatches" in names:
            # After a stage or rank fix the bottleneck's measured bubble no longer applies:
            # the schedule model with the fixed stage times says what the microbatches add.
            fixed = "balanced_stages" in names or "peer_median_compute" in names
            saved += self.model.microbatch_saving_us(balanced="balanced_stages" in names, capped=not fixed)
        return max(0.0, min(100.0, 100.0 * saved / m))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "measured_step_us": round(self.model.measured_step_us, 3),
            "replayed_step_us": round(self.baseline.step_us, 3),
            "model_error_pct": round(self.model_error_pct, 3),
            "groups": len(self.model.groups),
            "unreached_members": self.baseline.unreached,
            "savings_pct": {},
            "step_us": {},
        }
        for name in WHATIFS:
            pct = self.savings_pct(name)
            if pct is None:
                continue
            out["savings_pct"][name] = round(pct, 3)
            if name in self.results:
                out["step_us"][name] = round(self._bounded(self.results[name].step_us, (name,)), 3)
        bound = self.savings_pct("no_variation")
        if bound is not None and bound > 0:
            # How much of the job without stragglers each fix that evens out the work
            # reaches, alone and all together (structural fixes, more microbatches or
            # overlapped collectives, can go past it and are not counted).
            even = [n for n in EVENING if n in self.results]
            together = self.combined_pct(even) if even else None
            out["bound"] = {
                "whatif": "no_variation",
                "savings_pct": round(bound, 3),
                "reached_pct": {n: round(min(100.0, 100.0 * out["savings_pct"][n] / bound), 1) for n in even},
                "reached_together_pct": None if together is None else round(min(100.0, 100.0 * together / bound), 1),
            }
        return out


def run_whatifs(model: JobModel) -> WhatIfResults:
    """Replay ``model`` unchanged and once per applicable what-if."""
    base = model.replay(())
    results = {name: model.replay((name,)) for name in model.applicable() if name != "double_microbatches"}
    mb = model.microbatch_saving_us() if model.pipeline is not None else 0.0
    return WhatIfResults(model=model, baseline=base, results=results, microbatch_saving_us=mb)


__all__ = ["BOUNDS", "WHATIFS", "JobModel", "PipelineShape", "WhatIfResults", "build_job_model", "run_whatifs", "schedule_span_us"]
