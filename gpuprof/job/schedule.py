"""The pipeline schedule model behind ``double_microbatches``.

Twice the microbatches at half the size changes the schedule's structure, which a replay
of the measured graph cannot show. So the what-if is worked out on a model of the schedule
instead: :func:`pipeline_shape` reads the pipeline's stages, microbatches and per-stage
forward and backward times from the job's pipeline finding
(:func:`gpuprof.job.pipeline_parallel.analyze_pipeline`) into a :class:`PipelineShape`;
:func:`schedule_span_us` is the makespan of one step on that model (GPipe or 1F1B, an
interleaved schedule as 1F1B over more, smaller microbatches); and
:func:`microbatch_saving_us` compares ``m`` with ``2m`` microbatches, bounded by half the
fill and drain the bottleneck rank measurably sat through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpuprof.accounting.graph import EV_P2P
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.findings import PipelineFindings
from gpuprof.model import intervals as iv


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


def pipeline_shape(
    pipe: PipelineFindings | None, summaries: Sequence[RankSummary], bubble_us_per_step: Mapping[int, float]
) -> PipelineShape | None:
    """The schedule model's inputs, from the job's pipeline finding ``pipe`` (``None`` when
    it lacks the microbatches, the stages, the span or the per-stage times)."""
    if pipe is None:
        return None
    m = pipe.microbatches
    p = pipe.stages
    span = pipe.span_us
    rows = sorted(pipe.per_stage, key=lambda r: r.stage)
    if not m or p < 2 or not span or len(rows) != p:
        return None
    f: list[float] = []
    b: list[float] = []
    for row in rows:
        if row.forward_per_microbatch_us is not None and row.backward_per_microbatch_us is not None:
            f.append(float(row.forward_per_microbatch_us))
            b.append(float(row.backward_per_microbatch_us))
        elif row.compute_per_microbatch_us is not None:
            c = float(row.compute_per_microbatch_us)
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
        v=int(pipe.chunks or 1),
        schedule=str(pipe.schedule or "1f1b"),
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


def microbatch_saving_us(pl: PipelineShape | None, balanced: bool = False, capped: bool = True) -> float:
    """Per step, what twice the microbatches at half the size saves (``balanced``: with
    the stages' compute evened out first). Two models bound it and the tighter is
    taken: the schedule model (per-stage forward and backward times, ``m`` against
    ``2m`` microbatches, scaled to the measured span), which assumes a microbatch of
    half the size takes half the time and sees nothing outside the pipeline; and half
    the fill and drain the bottleneck rank sat through (its measured bubble), which
    leaves the per-transfer latencies that do not shrink in."""
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


__all__ = ["PipelineShape", "microbatch_saving_us", "pipeline_shape", "schedule_span_us"]
