"""The what-ifs behind every recommendation: one job model, replayed with each cause removed.

:func:`gpuprof.job.assemble.build_job_model` ties the ranks' graphs
(:mod:`gpuprof.accounting.graph`) together with the groups that couple them
(:mod:`gpuprof.job.coupling`: matched collectives, point-to-point pairs, barriers) into a
:class:`JobModel`, and :func:`gpuprof.job.whatif_results.run_whatifs` replays it (:mod:`gpuprof.job.replay`)
unchanged (the model's error against the measured step time) and once per what-if. Every
saving is

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
``peer_median_link``    op-level timelines: every pipeline link's transfers (the sends and
                        receives between two stages of one replica) at most the median of the
                        same link on the other replicas (:mod:`gpuprof.job.peercomm`).
``peer_median_collective`` op-level timelines: every collective's transfers at most the
                        median of the same op on the other groups (one stage's slow
                        data-parallel group).
``peer_median_host``    every rank's own host work (Python, framework, launches; the
                        ``host_work`` intervals) takes at most the median of its same-work
                        peers' per step: each launch inside it comes that share of the host
                        work before it earlier.
``no_variation``        op-level timelines: the job without stragglers, the bound the fixes
                        are measured against -- every compute op at the mean of its type over
                        ranks, stages and steps, every communication op's transfer at the
                        median of its type, and no launch delay (the definition of the
                        published what-if simulator's "ideal" timeline).

Op-level timelines replay on their own dependency model (:mod:`gpuprof.job.opdag`: program
order, send/receive pairs, collectives and the untimed waits before any op), kernel-level
traces on the graphs of :mod:`gpuprof.accounting.graph` (:mod:`gpuprof.job.replay`).

A what-if that does not apply to the job (nothing to remove, no peers, no pipeline) is not
replayed. Here: the names (:data:`WHATIFS`), what each changes (:meth:`JobModel.whatif`),
and the savings replayed (:class:`gpuprof.job.whatif_results.WhatIfResults`); the factors of the what-ifs that even
out the work come from :mod:`gpuprof.job.samework`, ``double_microbatches`` from the
schedule model of :mod:`gpuprof.job.schedule`. Pure: the summaries are only read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import (
    EV_COMPUTE,
    EV_COPY,
    RankGraph,
)
from gpuprof.job import peercomm, samework
from gpuprof.job import whatif_registry as registry
from gpuprof.job.floor import step_floor_us, transfer_us
from gpuprof.job.opdag_compile import OpDag
from gpuprof.job.opdag_run import run_opdag
from gpuprof.job.replay import Group, JobReplay, ReplayPlan, WhatIf, replay_job
from gpuprof.job.schedule import PipelineShape, microbatch_saving_us, schedule_span_us
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.timeline import CopyKind

FloatArray = npt.NDArray[np.float64]

# The what-ifs and what each says, the bound, the fixes that even out the work, the copy
# what-ifs: all read from their declarations (gpuprof.job.whatif_registry).
WHATIFS: Mapping[str, str] = registry.WHATIFS
BOUNDS: frozenset[str] = registry.names_where(bound=True)
EVENING: tuple[str, ...] = tuple(s.name for s in registry.REGISTRY if s.evening)
HIDES_COPIES: frozenset[str] = registry.names_where(hides_copies=True)


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
    # Op-level timelines: the dependency model of their ops (gpuprof.job.opdag), which
    # every replay of such a job runs on instead of the kernel-level graphs.
    dag: OpDag | None = None
    # What every replay of this job shares, built at the first replay.
    _plan: list[ReplayPlan] = field(default_factory=list, compare=False, repr=False)
    # Derived tables that several what-ifs read (the peer factors), built at first use.
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def applicable(self) -> list[str]:
        """The what-ifs that change something in this job (each declaration says,
        :mod:`gpuprof.job.whatif_registry`)."""
        return [spec.name for spec in registry.REGISTRY if spec.applies(self)]

    def op_variation(self) -> dict[str, tuple[float, float, int]]:
        """Op-level timelines: per compute op type, its mean duration (us), its coefficient
        of variation among the ranks that do the same work and how many ops
        (:func:`gpuprof.job.samework.op_variation`)."""
        return samework.op_variation(self.graphs, self.peers)

    def heavy_ranks(self, margin: float = 0.01) -> list[int]:
        """Ranks that computed more than their same-work group's mean (by ``margin``) in
        some step: where ``balanced_batches`` takes work away."""
        return samework.heavy_ranks(self.peers, self.compute_by_step, margin)

    def slowest_per_step(self) -> dict[int, list[int]]:
        """Per same-work group (numbered by its lowest rank) with two or more ranks, the rank
        with the most compute in each step."""
        return samework.slowest_per_step(self.peers, self.compute_by_step)

    def slow_ranks(self) -> dict[int, float]:
        """Ranks computing at least :data:`~gpuprof.job.samework.SLOW_RANK_RATIO` times the
        median of their same-work peers (the other ranks doing the same work), with that ratio."""
        return samework.slow_ranks(self.peers, self.compute_us_per_step)

    def _variation_factors(self) -> dict[int, FloatArray]:
        """``no_variation``'s per-event factors (:func:`gpuprof.job.samework.variation_factors`)."""
        return samework.variation_factors(self.graphs)

    def _batch_factors(self) -> dict[int, FloatArray]:
        """``balanced_batches``' per-event factors (:func:`gpuprof.job.samework.batch_factors`)."""
        return samework.batch_factors(self.graphs, self.peers, self.step_of_event, self.compute_us_per_step)

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

    def step_floor_us(self, names: Iterable[str]) -> float:
        """The shortest step the what-ifs ``names`` can give when they keep the compute
        (:mod:`gpuprof.job.floor`); 0 when they change it."""
        if "transfers" not in self._cache:
            self._cache["transfers"] = transfer_us(self.graphs, self.groups)
        steps = {r: int(c.size) for r, c in self.compute_by_step.items()}
        return step_floor_us(self.graphs, self._cache["transfers"], steps, names)

    def _peer_factors(self) -> dict[int, FloatArray]:
        """``peer_median_compute``'s per-event factors (:func:`gpuprof.job.samework.peer_factors`),
        worked out once per model."""
        cached = self._cache.get("peer_factors")
        if cached is None:
            cached = self._cache["peer_factors"] = samework.peer_factors(
                self.peers,
                self.segment_of_event,
                self.compute_by_segment,
                self.step_of_event,
                self.compute_by_step,
                self.compute_us_per_step,
            )
        return dict(cached)

    def _comm_factors(self, kind: str) -> dict[int, FloatArray]:
        """``peer_median_link`` / ``peer_median_collective``'s per-event factors
        (:func:`gpuprof.job.peercomm.factors`), once per model."""
        key = "comm_factors_" + kind
        if key not in self._cache:
            self._cache[key] = peercomm.factors(self.dag, kind) if self.dag is not None else {}
        return dict(self._cache[key])

    def _host_removed(self) -> dict[int, Intervals]:
        """``peer_median_host``'s host time removed per rank (:func:`gpuprof.job.samework.host_cuts`)."""
        if "host_removed" not in self._cache:
            self._cache["host_removed"] = samework.host_cuts(self.graphs, self.peers, self.compute_by_step)
        return dict(self._cache["host_removed"])

    def _stage_factors(self, base: Mapping[int, float] | None = None) -> dict[int, float]:
        """Per rank, the scale that brings its stage's compute to the mean over stages
        (``base``: compute per step after an earlier change, e.g. the peer fix)."""
        return samework.stage_factors(self.stage_of, self.compute_us_per_step if base is None else base)

    def whatif(self, names: Iterable[str]) -> WhatIf:
        """One change combining ``names``: each declaration makes its change, in order
        (``double_microbatches`` is not a graph change)."""
        names = list(names)
        change = registry.Change(frozenset(names))
        for spec in registry.in_change_order(frozenset(names)):
            if spec.change is not None:
                spec.change(self, change)
        scale: dict[int, FloatArray] = {}
        for g in self.graphs:
            f_ev = np.ones(g.n_events)
            got = change.per_event.get(g.rank)
            if got is not None and got.size == g.n_events:
                f_ev = got.copy()
            fr = change.compute_factor.get(g.rank)
            if fr is not None and abs(fr - 1.0) > 1e-9:
                f_ev = np.where(g.kind == EV_COMPUTE, f_ev * fr, f_ev)
            copies = g.kind == EV_COPY
            pageable = g.pageable if g.pageable is not None else np.zeros(g.n_events, dtype=bool)
            if change.zero_pageable_copies:
                f_ev = np.where(copies & pageable, 0.0, f_ev)
            if change.zero_other_copies:
                f_ev = np.where(copies & ~pageable, 0.0, f_ev)
            if (f_ev != 1.0).any():
                scale[g.rank] = f_ev
        return WhatIf(
            name="+".join(names),
            removed=change.removed,
            unblock=frozenset(change.unblock),
            scale=scale,
            transfer_scale=change.transfer_scale,
            p2p_scale=change.p2p_scale,
            no_delays=change.no_delays,
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
        if self.dag is not None:
            return run_opdag(self.dag, self.whatif(names))
        if not self._plan:
            self._plan.append(ReplayPlan(self.graphs, self.groups, self.offsets_us))
        return replay_job(self.graphs, self.groups, self.offsets_us, self.whatif(names), plan=self._plan[0])

    def microbatch_saving_us(self, balanced: bool = False, capped: bool = True) -> float:
        """Per step, what twice the microbatches at half the size saves (``balanced``: with
        the stages' compute evened out first; see :func:`gpuprof.job.schedule.microbatch_saving_us`)."""
        return microbatch_saving_us(self.pipeline, balanced, capped)


__all__ = [
    "BOUNDS",
    "EVENING",
    "HIDES_COPIES",
    "WHATIFS",
    "JobModel",
    "PipelineShape",
    "schedule_span_us",
]
