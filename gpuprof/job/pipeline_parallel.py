"""Pipeline parallelism: stages, microbatches, schedule, and the bubble each stage sits in.

Detection and stage order
    From the parallel layout a reader found (``pp_rank``/``pp_size``, e.g. the thread names
    of a Megatron timeline); else from the stage indices of torch.distributed.pipelining's
    ``PP:<stage><action><mb>`` ranges (``pp_stage`` of the phases; a rank running several
    stages runs an interleaved schedule); else from the process group of the ranks'
    point-to-point calls (a rank's stage is its position in that group's rank list, which
    also tells data-parallel replicas of a stage apart); otherwise, when two or more ranks run
    point-to-point calls, each such rank is taken as a stage, ordered by when it starts
    computing in the first step (the first stage starts first: every later stage waits for
    its activations).

Microbatches and schedule
    The microbatch count ``m`` is the number of forward passes a stage runs per step (the
    ``forward_calls`` of its phases), else the first stage's sends per step (it sends each
    microbatch's activations once), else its bursts of compute per step (forward and
    backward alternate with idle gaps), divided by the number of model chunks ``v`` of an
    interleaved schedule (``vpp_size`` of the layout, or ``pp_chunks`` of the phases; 1
    otherwise); ``microbatches_source`` says which signal it came from. The schedule is GPipe
    when the first stage sends all its forward activations before it receives the first
    gradient, 1F1B when it receives a gradient earlier, interleaved 1F1B when ``v > 1``.
    (A plain NCCL send on the first stage is a forward send, a receive a backward one.)
    Both GPipe and 1F1B leave a theoretical bubble of ``(p-1)/(m+p-1)`` of the pipeline's
    span with ``p`` balanced stages; interleaving shrinks it to ``(p-1)/(v*m+p-1)``.

Pipeline span of a step
    From the first stage's first compute of the step (fill starts) to the end of the
    compute that follows its last point-to-point transfer of the step (its last backward:
    drain ends), on the aligned clock. The first stage opens and closes the pipeline in
    GPipe and 1F1B alike.

Bubble (the ``pipeline_bubble`` claim)
    On a stage, each idle gap inside the span during which the stage sends or receives
    activations or gradients is time spent waiting for a neighbour -- fill, drain and the
    waits of the steady state. A gap with no transfer in it is left to the other rules
    (host overhead, memory, ...). Collectives inside such a gap are bubble too: a stage
    that drains into the step-end all-reduce (or reduces its gradients during the drain)
    waits for the pipeline, and the collective only ends when the first stage's last
    backward is done; tuning the collective would not shorten the step. The measured
    bubble fraction of a stage is its claimed time inside the span over the span, averaged
    over steps, to be set beside the theoretical one. A later stage that already waits for
    activations before the first stage starts computing (from the start of its step) is
    filling the pipeline as well: that wait is claimed too, outside the fraction.

Imbalance
    A stage's compute per microbatch is its forward plus backward time per step over ``m``
    (of its typical data-parallel replica, :func:`gpuprof.job.samework.typical`: one slow
    replica is a slow rank, reported as a straggler against its same-stage peers, not a
    heavier stage).
    With per-microbatch times ``t_k``, a pipeline step lasts about
    ``sum(t_k) + (m-1) * max(t_k)`` (each microbatch crosses every stage once; the slowest
    stage sets the pace of the other ``m-1``), which is how the slowest stage inflates every
    other stage's bubble beyond the theoretical one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuprof.accounting.summary import RankSummary
from gpuprof.job.findings import PipelineFindings, SlowestStage, StageRow
from gpuprof.job.samework import typical
from gpuprof.model import intervals as iv
from gpuprof.model.table import Table
from gpuprof.model.timeline import Category


@dataclass(frozen=True)
class PipelineResult:
    """``claims[rank]``: bubble intervals on the rank's own clock; ``findings``: what was
    found (see :func:`analyze_pipeline`); ``stage_of[rank]``: stage index of each rank."""

    claims: Mapping[int, iv.Intervals]
    findings: PipelineFindings
    stage_of: Mapping[int, int] = field(default_factory=dict)
    bubble_us_per_step: Mapping[int, float] = field(default_factory=dict)


def theoretical_bubble_fraction(stages: int, microbatches: int, chunks: int = 1) -> float:
    """Idle share of the pipeline span with balanced stages: ``(p-1)/(v*m+p-1)``."""
    if stages < 1 or microbatches < 1 or chunks < 1:
        raise ValueError("stages, microbatches and chunks must be positive")
    return (stages - 1) / (chunks * microbatches + stages - 1)


def modelled_span_us(per_microbatch_us: Sequence[float], microbatches: int) -> float:
    """Pipeline span with per-stage microbatch times ``t_k``: ``sum(t) + (m-1) max(t)``."""
    if not per_microbatch_us:
        return 0.0
    return float(sum(per_microbatch_us)) + (microbatches - 1) * float(max(per_microbatch_us))


def _p2p(s: RankSummary) -> Table:
    """The rank's point-to-point calls (rows of its comms table)."""
    c = s.comms_table
    if len(c) == 0:
        return c
    return c.derived("p2p", lambda t: t.take(np.flatnonzero(np.asarray(t["category"]) == int(Category.P2P))))


def _strs(t: Table, column: str) -> list[str]:
    """A column of a comms table as strings."""
    return [str(v) for v in t[column].tolist()] if len(t) else []


def _distinct(values: list[str]) -> list[str]:
    """Distinct values in order of first appearance."""
    return list(dict.fromkeys(values))


def _directions(p: Table) -> tuple[np.ndarray, np.ndarray]:
    """Masks over ``p``'s rows: forward sends (a timer's ``forward-send`` or an NCCL
    ``send``) and backward receives (``backward-recv`` or ``recv``)."""
    names = _strs(p, "name")
    coll = _strs(p, "coll_name") if "coll_name" in p else names
    fwd = np.array([("forward-send" in n) or c == "send" for n, c in zip(names, coll)], dtype=bool)
    bwd = np.array([("backward-recv" in n) or c == "recv" for n, c in zip(names, coll)], dtype=bool)
    return fwd, bwd


def _stages_from_groups(summaries: Sequence[RankSummary]) -> dict[int, int] | None:
    """Stage = position of the rank in the process group its point-to-point calls use.

    Pipeline groups list their ranks in stage order (Megatron builds them so, and so do
    users of torch.distributed.pipelining); data-parallel replicas of a stage sit at the
    same position of their own pipeline group.
    """
    out: dict[int, int] = {}
    for s in summaries:
        p = _p2p(s)
        if len(p) == 0 or "pg" not in p:
            continue
        for pg in _distinct(_strs(p, "pg")):
            members = tuple((s.process_groups or {}).get(str(pg), ()))
            if len(members) >= 2 and s.rank in members:
                out[s.rank] = members.index(s.rank)
                break
    with_p2p = sum(1 for s in summaries if len(_p2p(s)))
    if len(out) >= 2 and len(set(out.values())) >= 2 and len(out) == with_p2p:
        return out
    return None


def _stages(
    summaries: Sequence[RankSummary], offsets: Mapping[int, float]
) -> tuple[dict[int, int], str] | None:
    layout = {s.rank: int(s.parallel["pp_rank"]) for s in summaries if "pp_rank" in s.parallel}
    sizes = [int(s.parallel.get("pp_size", 0)) for s in summaries if "pp_rank" in s.parallel]
    if layout and (max(sizes, default=0) > 1 or len(set(layout.values())) > 1):
        return layout, "layout"
    marked = {s.rank: int(s.phases_us["pp_stage"]) for s in summaries if "pp_stage" in s.phases_us}
    if len(marked) >= 2 and len(set(marked.values())) >= 2:
        # torch.distributed.pipelining names its actions by stage (``PP:1F0``).
        return marked, "annotations"
    grouped = _stages_from_groups(summaries)
    if grouped is not None:
        return grouped, "process groups"
    with_p2p = [s for s in summaries if len(_p2p(s)) and s.compute[0].size]
    if len(with_p2p) < 2:
        return None
    first = sorted(with_p2p, key=lambda s: float(s.compute[0][0]) - offsets.get(s.rank, 0.0))
    return {s.rank: k for k, s in enumerate(first)}, "p2p timing"


def _microbatches(members: Mapping[int, list[RankSummary]], chunks: int) -> tuple[int | None, str | None]:
    """The microbatch count and the signal it came from: the stages' forward annotations
    (``forward_calls`` of the phases), else the first stage's sends per step (a timer's
    ``forward-send``, or NCCL ``send`` calls: the first stage sends each microbatch's
    activations once; with neither direction known, half its point-to-point calls: one send
    forward, one receive back per microbatch), else the first stage's forward compute
    clusters per step (bursts of compute separated by idle gaps, halved for the backward
    bursts that alternate with them)."""
    calls = [s.phases_us.get("forward_calls") for ss in members.values() for s in ss]
    known = [float(c) for c in calls if c is not None and c > 0]
    if known:
        return max(1, round(float(np.median(known)) / chunks)), "forward annotations"
    first = members[min(members)]
    counts: list[float] = []
    for s in first:
        p = _p2p(s)
        if not len(p) or not s.steps:
            continue
        coll = _strs(p, "coll_name") if "coll_name" in p else _strs(p, "name")
        n_fwd = int(_directions(p)[0].sum())
        if n_fwd:
            counts.append(n_fwd / len(s.steps))
        elif "recv" not in coll:
            counts.append(len(p) / 2.0 / len(s.steps))
    if counts:
        return max(1, round(float(np.median(counts)) / chunks)), "point-to-point sends of the first stage"
    bursts = [_compute_bursts(s) for s in first]
    found = [b for b in bursts if b]
    if found:
        return max(1, round(float(np.median(found)) / 2.0 / chunks)), "compute bursts of the first stage"
    return None, None


def _compute_bursts(s: RankSummary) -> float | None:
    """Bursts of compute per step on one rank: compute separated by idle gaps of at least
    2% of the step."""
    if not s.steps:
        return None
    cs, ce = s.compute
    if cs.size < 2:
        return None
    step = float(np.median([st.duration_us for st in s.steps]))
    gaps = cs[1:] - ce[:-1]
    long = int(np.sum(gaps >= 0.02 * step))
    return (long + len(s.steps)) / len(s.steps)


def _schedule(first_stage: Sequence[RankSummary], m: int | None, chunks: int) -> str:
    if chunks > 1:
        return "interleaved-1f1b"
    for s in first_stage:
        p = _p2p(s)
        if len(p) == 0:
            continue
        # The first stage only sends activations forward and receives gradients back, so
        # a plain NCCL send / recv there is a forward send / a backward receive.
        fwd, bwd = _directions(p)
        if not fwd.any() or not bwd.any():
            continue
        step = np.asarray(p["step"])
        start = np.asarray(p["start_us"], dtype=np.float64)
        gpipe = []
        for number in np.unique(step[fwd]).tolist():
            f = fwd & (step == number)
            b = bwd & (step == number)
            if b.any():
                # GPipe sends every activation before the first gradient comes back.
                early = int((start[f] < start[b].min()).sum())
                gpipe.append(early >= (m if m is not None else int(f.sum())))
        if gpipe:
            return "gpipe" if all(gpipe) else "1f1b"
    return "unknown"


def _step_spans(s: RankSummary) -> dict[int, tuple[float, float]]:
    return {st.number: (st.start_us, st.end_us) for st in s.steps}


def _replica(s: RankSummary) -> Any:
    """Which data-parallel replica's pipeline a rank belongs to: its ``dp_rank`` where the
    layout says, else the process group its point-to-point calls use (one per pipeline),
    else one pipeline for all."""
    if "dp_rank" in s.parallel:
        return ("dp", int(s.parallel["dp_rank"]))
    p = _p2p(s)
    if len(p) and "pg" in p:
        groups = [g for g in _distinct(_strs(p, "pg")) if g]
        if groups:
            return ("pg", groups[0])
    return ("all", 0)


def _span_of_step(s: RankSummary, lo: float, hi: float, p2p: Table) -> tuple[float, float] | None:
    """The pipeline span of one step on a first-stage rank, on its own clock."""
    cs, ce = s.compute
    inside = (ce > lo) & (cs < hi)
    if not inside.any() or len(p2p) == 0:
        return None
    start = float(cs[inside][0])
    last_p2p = float(np.max(p2p["end_us"]))
    # Timer ops overlap by microseconds: the last backward may start just before the
    # receive's timer ends.
    after = np.flatnonzero(inside & (ce > last_p2p))
    if after.size == 0:
        return start, last_p2p
    # The compute chain right after the last transfer: the last backward. Stop at the
    # first gap that is long against the step (the optimizer or next-step work).
    gap_limit = max(50.0, 0.002 * (hi - lo))
    end_idx = after[0]
    for j in after[1:]:
        if cs[j] - ce[end_idx] > gap_limit:
            break
        end_idx = j
    return start, float(ce[end_idx])


def _claim(s: RankSummary, span: tuple[float, float], p2p: Table) -> iv.Intervals:
    """Idle gaps of ``s`` inside ``span`` that hold one of its point-to-point transfers."""
    lost = iv.clip(s.lost, span[0], span[1])
    if lost[0].size == 0 or len(p2p) == 0:
        return iv.empty()
    ps = np.asarray(p2p["start_us"], dtype=np.float64)
    pe = np.asarray(p2p["end_us"], dtype=np.float64)
    # A gap holds a transfer when they overlap (a zero-length timer op counts if inside).
    covered = iv.overlap_with_each(lost, iv.make(ps, np.maximum(pe, ps + 1e-3)))
    return lost[0][covered > 0], lost[1][covered > 0]


def _during(p2p: Table, lo: float, hi: float) -> Table:
    """The calls of ``p2p`` that overlap ``(lo, hi)``."""
    if len(p2p) == 0:
        return p2p
    return p2p.take(np.flatnonzero((np.asarray(p2p["end_us"]) > lo) & (np.asarray(p2p["start_us"]) < hi)))


def analyze_pipeline(summaries: Sequence[RankSummary], offsets: Mapping[int, float]) -> PipelineResult | None:
    """Pipeline-parallel analysis of a job, or ``None`` when it is not pipeline parallel.

    ``offsets`` (us, per rank) align the ranks' clocks. Keys of ``findings``: ``stages``,
    ``stage_source`` (``layout`` / ``annotations`` / ``p2p timing``), ``microbatches``
    (None unknown) and ``microbatches_source`` (the signal it was counted from), ``chunks``, ``schedule`` (``gpipe``, ``1f1b``, ``interleaved-1f1b``,
    ``unknown``), ``theoretical_bubble_fraction`` (None without microbatches),
    ``span_us`` (median pipeline span of a step), ``steps_measured``, ``per_stage`` (list of
    ``{stage, ranks, bubble_fraction, bubble_us_per_step}`` plus, where phases are known,
    ``forward_per_microbatch_us``, ``backward_per_microbatch_us``,
    ``compute_per_microbatch_us``, ``modelled_bubble_fraction``), and with two or more
    stages timed ``slowest_stage``, ``slowest_stage_ranks``, ``slowest_stage_ratio``
    (over the median of the others), ``modelled_span_us`` and ``modelled_balanced_span_us``
    (the bottleneck model with the measured and with evenly spread stage times).
    """
    found = _stages(summaries, offsets)
    if found is None:
        return None
    stage_of, source = found
    by_rank = {s.rank: s for s in summaries}
    members: dict[int, list[RankSummary]] = {}
    for rank, st in sorted(stage_of.items()):
        members.setdefault(st, []).append(by_rank[rank])
    p = max(max(members) + 1, max((int(s.parallel.get("pp_size", 0)) for s in summaries), default=0))
    chunks = max(
        1,
        max((int(s.parallel.get("vpp_size", 1) or 1) for s in summaries), default=1),
        max((int(s.phases_us.get("pp_chunks", 1)) for s in summaries), default=1),
    )
    m, m_source = _microbatches(members, chunks)
    schedule = _schedule(members[min(members)], m, chunks)

    # Pipeline span per step: from the first-stage ranks, on the aligned clock -- each
    # data-parallel replica its own pipeline: a fast replica that finishes its pipeline and
    # then waits for a slow one in the gradient collective waits for a straggler, not for
    # its own pipeline (the union of every replica's span would call that wait a bubble).
    replica = {s.rank: _replica(s) for s in summaries}
    by_replica: dict[Any, dict[int, tuple[float, float]]] = {}
    for s in members[min(members)]:
        p2p_all = _p2p(s)
        off = offsets.get(s.rank, 0.0)
        spans_r = by_replica.setdefault(replica[s.rank], {})
        for number, (lo, hi) in _step_spans(s).items():
            p2p = _during(p2p_all, lo, hi)
            sp = _span_of_step(s, lo, hi, p2p)
            if sp is None:
                continue
            a = (sp[0] - off, sp[1] - off)
            old = spans_r.get(number)
            spans_r[number] = a if old is None else (min(old[0], a[0]), max(old[1], a[1]))
    # The job's span (for the findings): every replica's together.
    spans: dict[int, tuple[float, float]] = {}
    for spans_r in by_replica.values():
        for number, a in spans_r.items():
            old = spans.get(number)
            spans[number] = a if old is None else (min(old[0], a[0]), max(old[1], a[1]))

    claims: dict[int, iv.Intervals] = {}
    fraction: dict[int, float] = {}
    bubble_per_step: dict[int, float] = {}
    for s in summaries:
        if s.rank not in stage_of:
            continue
        off = offsets.get(s.rank, 0.0)
        p2p_all = _p2p(s)
        parts_s: list[np.ndarray] = []
        parts_e: list[np.ndarray] = []
        fracs: list[float] = []
        own_steps = _step_spans(s)
        mine = by_replica.get(replica[s.rank]) or spans
        for number, (a0, a1) in mine.items():
            lo, hi = a0 + off, a1 + off
            # A later stage that waits for activations from the start of its step (before
            # the first stage has begun computing) is filling the pipeline too.
            begin = min(lo, own_steps[number][0]) if number in own_steps else lo
            p2p = _during(p2p_all, begin, hi)
            got = _claim(s, (begin, hi), p2p)
            parts_s.append(got[0])
            parts_e.append(got[1])
            fracs.append(iv.total(iv.clip(got, lo, hi)) / (hi - lo) if hi > lo else 0.0)
        claim = iv.union(np.concatenate(parts_s), np.concatenate(parts_e)) if parts_s else iv.empty()
        claims[s.rank] = claim
        fraction[s.rank] = float(np.mean(fracs)) if fracs else 0.0
        bubble_per_step[s.rank] = iv.total(claim) / max(len(mine), 1)

    span_us = float(np.median([b - a for a, b in spans.values()])) if spans else None
    per_stage: list[StageRow] = []
    t_mb: dict[int, float] = {}
    for st, ss in sorted(members.items()):
        fwd = [s.phases_us.get("forward") for s in ss]
        bwd = [s.phases_us.get("backward") for s in ss]
        row = StageRow(
            stage=st,
            ranks=tuple(s.rank for s in ss),
            bubble_fraction=round(float(np.mean([fraction[s.rank] for s in ss])), 4),
            bubble_us_per_step=round(float(np.mean([bubble_per_step[s.rank] for s in ss])), 3),
        )
        if m and all(f is not None for f in fwd) and all(b is not None for b in bwd):
            # The typical replica (the median; of two, the faster): one slow replica is a slow
            # rank, not a heavier stage.
            f_mb = typical([float(f) for f in fwd if f is not None]) / (m * chunks)
            b_mb = typical([float(b) for b in bwd if b is not None]) / (m * chunks)
            t_mb[st] = f_mb + b_mb
            row = replace(row, forward_per_microbatch_us=round(f_mb, 3), backward_per_microbatch_us=round(b_mb, 3),
                          compute_per_microbatch_us=round(f_mb + b_mb, 3))
        per_stage.append(row)

    theory = theoretical_bubble_fraction(p, m, chunks) if m else None
    slowest_stage = None
    if len(t_mb) >= 2 and m:
        slowest = max(t_mb, key=lambda k: t_mb[k])
        others = [t for k, t in t_mb.items() if k != slowest]
        ratio = t_mb[slowest] / float(np.median(others)) if float(np.median(others)) > 0 else None
        times = [t_mb[k] for k in sorted(t_mb)]
        balanced = [float(np.mean(times))] * len(times)
        slowest_stage = SlowestStage(
            stage=slowest,
            ranks=tuple(s.rank for s in members[slowest]),
            ratio=None if ratio is None else round(ratio, 3),
            modelled_span_us=round(modelled_span_us(times, m * chunks), 3),
            modelled_balanced_span_us=round(modelled_span_us(balanced, m * chunks), 3),
        )
        span = modelled_span_us(times, m * chunks)
        for i, row in enumerate(per_stage):
            k = row.stage
            if k in t_mb and span > 0:  # 0 when every op has no duration
                # What the bottleneck model predicts for this stage's bubble.
                per_stage[i] = replace(row, modelled_bubble_fraction=round(1.0 - m * chunks * t_mb[k] / span, 4))
    findings = PipelineFindings(
        stages=p,
        stage_source=source,
        microbatches=m,
        microbatches_source=m_source,
        chunks=chunks,
        schedule=schedule,
        theoretical_bubble_fraction=None if theory is None else round(theory, 4),
        span_us=None if span_us is None else round(span_us, 3),
        steps_measured=len(spans),
        per_stage=tuple(per_stage),
        slowest=slowest_stage,
    )
    return PipelineResult(
        claims=claims, findings=findings, stage_of=stage_of, bubble_us_per_step=bubble_per_step
    )
