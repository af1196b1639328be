"""Ranks late at the barriers of an op-level timeline (``straggler-rank``): the ops that
start at the same instant on every rank, and what the last ranks to reach them do before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpuprof.advice.context import AdviceContext
from gpuprof.advice.distributed.slowranks import MIN_SAVINGS_PCT
from gpuprof.advice.finding import Fact, Finding, said
from gpuprof.advice.savings import savings_pct
from gpuprof.job.findings import LateComm
from gpuprof.model.report import Cause, RankReport

# Late communication worth naming takes at least this long per call (median).
LATE_OP_MIN_US = 1000.0


def stages_of(ctx: AdviceContext, ranks: Sequence[int]) -> tuple[int, ...] | None:
    """The pipeline stages of ``ranks`` when every one of them has a known stage."""
    per = ctx.cross.per_rank
    known = {r: per[r].stage for r in ranks if r in per and per[r].stage is not None}
    stages = sorted({int(st) for st in known.values() if st is not None})
    return tuple(stages) if stages and len(known) == len(ranks) else None


def _late_ops(ops: Sequence[LateComm]) -> tuple[dict[str, Any], ...]:
    """The late ranks' communication before the barriers worth naming, with its numbers
    (the phrase's values: ``barrier.late_comm``)."""
    out = []
    for op in ops:
        if float(op.total_us) <= 0 or float(op.median_us) < LATE_OP_MIN_US:
            continue
        out.append({
            "name": op.name,
            "median_us": float(op.median_us),
            "calls": op.calls,
            "only_late_ranks": bool(op.only_late_ranks),
            "waiting_median_us": None if op.waiting_median_us is None else float(op.waiting_median_us),
            "outliers": op.outliers,
            "outlier_us": tuple(float(x) for x in op.outlier_us) if op.outliers and op.outlier_us else None,
            "outlier_barriers": tuple(int(j) + 1 for j in op.outlier_barriers) if op.outliers else (),
        })
    return tuple(out)


def barrier_finding(ctx: AdviceContext, reports: Sequence[RankReport], wait: Mapping[int, float]) -> Finding | None:
    """Ranks that wait at barriers of an op-level timeline for ranks that arrive late.

    The estimate follows the critical-path model of the named stragglers: if the late
    ranks arrived with the latest waiting rank, the barrier would come sooner by that
    rank's wait (the smallest wait among the waiting ranks), on every rank."""
    b = ctx.cross.barrier_waits
    if b is None or not b.waited_for_ranks:
        return None
    slow = [int(r) for r in b.waited_for_ranks]
    waiting = [r for r in reports if r.rank not in slow and wait[r.rank] > 0]
    if not waiting:
        return None
    gain = min(wait[r.rank] / max(r.steps, 1) for r in waiting)
    median_wait = float(np.median([wait[r.rank] for r in waiting]))
    pct = savings_pct(reports, {r.rank: gain * max(r.steps, 1) for r in reports})
    if pct < MIN_SAVINGS_PCT:
        return None
    activity = b.last_activity
    late_ops = list(b.late_comm or ())
    comm_bound = any(name != "compute" for name in list(activity)[:1])
    steps = max(1, int(np.median([max(r.steps, 1) for r in waiting])))
    late, stages = tuple(slow), stages_of(ctx, slow)
    barriers = int(b.barriers)
    evidence = [said("barrier.waits", barriers=b.barriers, waiting=tuple(r.rank for r in waiting),
                     wait_us_per_step=median_wait / steps, who=(late, stages))]
    named = _late_ops(late_ops)
    if named:
        evidence.append(said("barrier.late_comm", ops=named, barriers=barriers, ranks=late, stages=stages))
    else:
        doing = tuple((name, n, b.barriers) for name, n in activity.items())
        evidence.append(said("barrier.last_activity", activity=doing))
    evidence.append(said("barrier.estimate", margin_us_per_step=gain))
    embedding = [op for op in late_ops if "embedding" in str(op.name).lower() and float(op.median_us) >= LATE_OP_MIN_US]
    holds = "embedding" if embedding else "communication" if late_ops or comm_bound else "none"
    actions = []
    if embedding:
        actions.append(said("barrier.untie_embeddings"))
        if any(op.outliers for op in embedding):
            actions.append(said("barrier.embedding_outliers"))
    if comm_bound or late_ops:
        actions.append(said("barrier.overlap_reduce"))
    if not actions:
        actions.append(said("straggler.phase_actions", phase="backward"))
    facts: dict[str, Fact] = {
        "barriers": barriers,
        "wait_us_per_step": median_wait / steps,
        "margin_us_per_step": gain,
        "late_rank": slow[0],
        "late_ranks": len(slow),
        "holds_up": holds,
    }
    return Finding("straggler-rank", Cause.STRAGGLER, pct, said("title.straggler.barrier", holds=holds, ranks=late, stages=stages),
                   tuple(evidence), tuple(actions), ranks=tuple(slow), facts=facts)
