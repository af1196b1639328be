"""Building the job model: every rank's summary and the job's findings in, a
:class:`~gpuprof.job.whatifs.JobModel` out.

:func:`build_job_model` takes the ranks with a graph (:mod:`gpuprof.accounting.graph`),
the groups that couple them (:mod:`gpuprof.job.coupling`), the clock offsets and the
pipeline's stages (:mod:`gpuprof.job.collectives`, :mod:`gpuprof.job.pipeline_parallel`),
and adds what the duration what-ifs compare: each rank's same-work peers, each event's
step and segment with the compute per step and per segment (:mod:`gpuprof.job.samework`),
the ranks that begin their steps late, and the pipeline's schedule model
(:mod:`gpuprof.job.schedule`). Pure: the summaries are only read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import EV_COLLECTIVE, EV_COMPUTE, RankGraph
from gpuprof.accounting.summary import RankSummary
from gpuprof.job import opdag
from gpuprof.job.coupling import barrier_groups, collective_groups, p2p_groups
from gpuprof.job.findings import PipelineFindings
from gpuprof.job.replay_types import Group
from gpuprof.job.schedule import pipeline_shape
from gpuprof.job.whatifs import JobModel
from gpuprof.model import intervals as iv

FloatArray = npt.NDArray[np.float64]


def build_job_model(
    summaries: Sequence[RankSummary],
    matched: Any = None,
    offsets_us: Mapping[int, float] | None = None,
    stage_of: Mapping[int, int] | None = None,
    pipeline: PipelineFindings | None = None,
    barrier_points_us: Sequence[float] = (),
    bubble_us_per_step: Mapping[int, float] | None = None,
) -> JobModel | None:
    """The job model of the active ranks, or ``None`` when no rank has a graph."""
    active = [s for s in summaries if s.graph is not None and s.window_us > 0]
    if not active:
        return None
    offsets = dict(offsets_us or {})
    stages = dict(stage_of or {})
    groups = collective_groups(active, matched, offsets)
    by_time = p2p_groups(active, offsets, stages)
    dag = opdag.build_opdag(active, offsets, groups, by_time) if opdag.applies(active) else None
    groups += by_time
    taken = {m for grp in groups for m in grp.members}
    groups += barrier_groups(active, barrier_points_us, offsets, taken)
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
        pipeline=pipeline_shape(pipeline, active, bubble_us_per_step or {}),
        step_of_event=steps,
        compute_by_step={r: _compute_by_step(graphs[r], idx) for r, idx in steps.items()},
        segment_of_event=segments,
        compute_by_segment={r: _compute_by_index(graphs[r], idx) for r, idx in segments.items()},
        late_start_us=_late_starts(active, offsets),
        dag=dag,
    )


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


__all__ = ["LATE_START_SHARE", "build_job_model"]
