"""Scenarios of many ranks: data parallel, stragglers, imbalance, pipelines, RL post-training.

Each function takes the scenario's knobs (units in their names, meanings in
:data:`gpuprof.simulate.scenarios.KNOB_HELP`) and returns a :class:`Plan`.
"""

from __future__ import annotations

import random
from collections.abc import Generator, Sequence
from contextlib import nullcontext
from statistics import mean, median
from typing import Any

from gpuprof.model.report import Cause
from gpuprof.simulate import comm
from gpuprof.simulate import workload as wl
from gpuprof.simulate.engine import COMPUTE_STREAM, Program, Wait
from gpuprof.simulate.fixes import (
    BALANCED_BATCHES,
    BALANCED_STAGES,
    DOUBLE_BANDWIDTH,
    DOUBLE_MICROBATCHES,
    NO_VARIATION,
    OVERLAP_COLLECTIVES,
    PEER_MEDIAN_COMPUTE,
    differs,
    faster,
    peer_median,
)
from gpuprof.simulate.plan import Plan, check
from gpuprof.simulate.rank import RankSim
from gpuprof.simulate.schedules import SCHEDULES, stage_order, theoretical_bubble
from gpuprof.simulate.workload import ALLGATHER_KERNEL, allreduce, dp_step, ring_us, sharded


def data_parallel(
    *,
    ranks: int = 4,
    steps: int = 3,
    layers: int = 8,
    layer_ms: float = 1.0,
    grad_mb: float = 200.0,
    buckets: int = 4,
    link_gbs: float = 5.0,
) -> Plan:
    """DDP with bucketed gradient all-reduce; on slow links the all-reduce is exposed."""
    check(ranks >= 2, "data_parallel needs at least 2 ranks")
    check(link_gbs > 0 and grad_mb > 0, "link_gbs and grad_mb must be positive")

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                yield from dp_step(
                    sim,
                    s,
                    ranks=ranks,
                    layers=layers,
                    layer_us=layer_ms * 1e3,
                    grad_mb=grad_mb,
                    buckets=buckets,
                    link_gbs=link_gbs,
                )

    comm_total = ring_us(grad_mb * 1e6, ranks, link_gbs)
    backward_us = 2 * layers * layer_ms * 1e3
    exposed = comm_total > 0.6 * backward_us
    return Plan(
        ranks,
        program,
        {"intended": "communication" if exposed else None},
        intended_whatifs=(OVERLAP_COLLECTIVES, DOUBLE_BANDWIDTH) if exposed else (),
    )


def dp_exposed(**knobs: Any) -> Plan:
    """Data parallel over slow links (5 GB/s): the gradient all-reduce is exposed."""
    return data_parallel(**{"link_gbs": 5.0, **knobs})


def dp_overlapped(**knobs: Any) -> Plan:
    """Data parallel over NVLink-class links: the all-reduce hides behind backward."""
    return data_parallel(**{"link_gbs": 200.0, **knobs})


def straggler(
    *,
    ranks: int = 4,
    steps: int = 3,
    layers: int = 8,
    layer_ms: float = 1.0,
    slow_rank: int = 2,
    slowdown: float = 1.5,
    grad_mb: float = 100.0,
    buckets: int = 4,
    link_gbs: float = 100.0,
) -> Plan:
    """One rank computes slower (thermal throttling, a bad GPU); the others wait for it."""
    check(ranks >= 2, "straggler needs at least 2 ranks")
    check(0 <= slow_rank < ranks, f"slow_rank must be in 0..{ranks - 1}")
    check(slowdown >= 1.0, "slowdown must be at least 1")

    factors = [slowdown if r == slow_rank else 1.0 for r in range(ranks)]
    fixed = peer_median(factors, [range(ranks)])

    def program(sim: RankSim) -> Program:
        f = (fixed if PEER_MEDIAN_COMPUTE in sim.fixes else factors)[sim.rank]
        for s in range(steps):
            with sim.step(s + 1):
                yield from dp_step(
                    sim,
                    s,
                    ranks=ranks,
                    layers=layers,
                    layer_us=layer_ms * 1e3 * f,
                    grad_mb=grad_mb,
                    buckets=buckets,
                    link_gbs=link_gbs,
                )

    return Plan(
        ranks,
        program,
        {"intended": "straggler", "culprit_ranks": [slow_rank]},
        whatifs=(PEER_MEDIAN_COMPUTE,) if differs(factors, fixed) else (),
        intended_whatifs=(PEER_MEDIAN_COMPUTE,),
        whatif_culprits={PEER_MEDIAN_COMPUTE: faster(factors, fixed)},
    )


def imbalance(
    *,
    ranks: int = 4,
    steps: int = 4,
    layers: int = 8,
    layer_ms: float = 1.0,
    seq_min: int = 512,
    seq_max: int = 4096,
    grad_mb: float = 100.0,
    buckets: int = 4,
    link_gbs: float = 100.0,
    seed: int = 0,
) -> Plan:
    """Data-dependent imbalance: each rank gets a different sequence length every step."""
    check(ranks >= 2, "imbalance needs at least 2 ranks")
    check(0 < seq_min <= seq_max, "need 0 < seq_min <= seq_max")
    rng = random.Random(seed * 31 + 5)
    seqs = [[rng.randint(seq_min, seq_max) for _ in range(ranks)] for _ in range(steps)]
    middle = (seq_min + seq_max) / 2
    # peer_median_compute: every rank's step at the step's median work over the group
    medians = [median(row) for row in seqs]

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                f = (medians[s] if PEER_MEDIAN_COMPUTE in sim.fixes else seqs[s][sim.rank]) / middle
                yield from dp_step(
                    sim,
                    s,
                    ranks=ranks,
                    layers=layers,
                    layer_us=layer_ms * 1e3 * f,
                    grad_mb=grad_mb,
                    buckets=buckets,
                    link_gbs=link_gbs,
                )

    slowest = [max(range(ranks), key=lambda r: row[r]) for row in seqs]
    return Plan(
        ranks,
        program,
        {
            "intended": "straggler",
            "culprit_ranks": sorted(set(slowest)),
            "slowest_rank_per_step": slowest,
            "seq_lens": seqs,
        },
        whatifs=(PEER_MEDIAN_COMPUTE,)
        if any(differs(row, [m] * ranks) for row, m in zip(seqs, medians))
        else (),
        intended_whatifs=(PEER_MEDIAN_COMPUTE,),
        whatif_culprits={
            PEER_MEDIAN_COMPUTE: sorted(
                {r for row, m in zip(seqs, medians) for r in faster(row, [m] * ranks)}
            )
        },
    )


def pipeline(
    *,
    stages: int = 4,
    microbatches: int = 8,
    schedule: str = "1f1b",
    chunks: int = 2,
    dp: int = 1,
    tp: int = 1,
    steps: int = 2,
    stage_ms: float = 1.0,
    act_mb: float = 4.0,
    grad_mb: float = 50.0,
    link_gbs: float = 200.0,
    slow_stage: int = -1,
    slow_rank: int = -1,
    slowdown: float = 1.5,
    replica_spread: float = 0.0,
    seq_cv: float = 0.0,
    annotate: bool = True,
    dist_opt: bool = False,
    tied_embeddings: bool = False,
    batched_p2p: bool = False,
    seed: int = 0,
) -> Plan:
    """Pipeline parallelism (times data parallelism with dp > 1); optionally a slow stage or rank.

    Ranks are laid out as Megatron-LM does with no tensor parallelism: rank = stage * dp +
    replica. After the pipeline flush each stage all-reduces its gradients over its
    data-parallel group (with ``dist_opt``: reduce-scatters them, and all-gathers the
    parameters at the start of the next step, as Megatron's distributed optimizer does),
    then the pipeline group all-reduces the gradient norm and reads it with ``.item()``
    before the optimizer step.

    A slow stage (more layers than the others) is slow on every replica; a slow rank is
    one GPU slower than the ranks that run the same stage; ``replica_spread`` makes the
    data-parallel replicas slower in steps up to that fraction (replica d by
    ``spread * d / (dp - 1)``, all its stages: a slower node). With
    ``annotate`` off, no ``forward_step`` / ``backward_step`` ranges mark the
    microbatches: only the NCCL send/recv kernels between stages show them.

    ``seq_cv`` makes each microbatch's work vary with its sequence lengths: a factor drawn
    per (replica, step, microbatch) from a gamma distribution of mean 1 and that
    coefficient of variation, the same on every stage of the replica (the microbatch
    flows through its pipeline). ``tied_embeddings``: the first and the last stage of each
    replica all-reduce their embedding gradients after the pipeline (Megatron's
    ``embedding-grads-all-reduce``). With ``dist_opt`` the gradient-norm all-reduce runs
    over every rank (the distributed optimizer's shards), else over the pipeline group.
    ``batched_p2p``: the steady-state exchanges of 1F1B are single calls that both stages
    wait for (Megatron's ``send_forward_recv_backward``: the data moves once both have
    posted), not a buffered send and a receive (megatron layout only).
    ``tp`` is the job's tensor-parallel size: the ranks simulated are TP rank 0 of each
    (pipeline, data-parallel) position, which is what the Megatron layout writes (global
    rank ``(stage * dp + replica) * tp``); their TP peers do the same work.
    """
    check(schedule in SCHEDULES, f"schedule must be one of {', '.join(SCHEDULES)}")
    check(stages >= 2 and microbatches >= 1 and dp >= 1, "need stages >= 2, microbatches >= 1, dp >= 1")
    v = chunks if schedule == "interleaved" else 1
    check(
        schedule != "interleaved" or (chunks >= 2 and microbatches % stages == 0),
        "interleaved needs chunks >= 2 and microbatches divisible by stages",
    )
    check(-1 <= slow_stage < stages, f"slow_stage must be -1 or in 0..{stages - 1}")
    check(-1 <= slow_rank < stages * dp, f"slow_rank must be -1 or in 0..{stages * dp - 1}")
    check(slowdown > 0 and replica_spread >= 0, "slowdown must be > 0 and replica_spread >= 0")
    check(tp >= 1 and seq_cv >= 0, "need tp >= 1 and seq_cv >= 0")
    p = stages
    n = p * dp
    xfer_us = act_mb * 1e6 / (link_gbs * 1e3)
    nelems = int(act_mb * 1e6 // 2)
    # replica d computes 1 + spread * d / (dp - 1) times slower: the last replica is the slowest
    replica_f = [1.0 + replica_spread * d / max(dp - 1, 1) for d in range(dp)]
    stage_work = [slowdown if st == slow_stage else 1.0 for st in range(p)]
    speed = [replica_f[r % dp] * (slowdown if r == slow_rank else 1.0) for r in range(n)]
    same_stage = [[st * dp + d for d in range(dp)] for st in range(p)]

    def compute_factors(fixes: frozenset[str]) -> list[float]:
        """Each rank's compute-time factor: its stage's work times its GPU's speed."""
        work = [mean(stage_work)] * p if BALANCED_STAGES in fixes else stage_work
        spd = peer_median(speed, same_stage) if PEER_MEDIAN_COMPUTE in fixes and not seq_cv else speed
        return [work[r // dp] * spd[r] for r in range(n)]

    # Work of each microbatch from its sequence lengths, per (replica, step, microbatch).
    seq_rng = random.Random(seed * 7919 + 13)
    shape = 1.0 / seq_cv**2 if seq_cv > 0 else 0.0
    seq = [
        [[seq_rng.gammavariate(shape, 1.0 / shape) if seq_cv > 0 else 1.0 for _ in range(microbatches)] for _ in range(steps)]
        for _ in range(dp)
    ]
    base_f = compute_factors(frozenset())
    # no_variation: every compute op at the mean of its type over ranks, stages and steps
    mean_work = mean(base_f[r] * x for r in range(n) for row in seq[r % dp] for x in row)

    def work_factors(fixes: frozenset[str], rank: int, step: int) -> list[float]:
        """The compute-time factor of each microbatch of ``rank`` in ``step``: its stage's
        work, its GPU's speed and the microbatch's sequence lengths, as the fixes leave them."""
        if NO_VARIATION in fixes:
            return [mean_work] * microbatches
        d = rank % dp
        f = compute_factors(fixes)[rank]
        w = seq[d][step]
        if BALANCED_BATCHES in fixes:
            w = [mean(x for rep in seq for x in rep[step])] * microbatches
        if PEER_MEDIAN_COMPUTE in fixes and seq_cv:
            # each rank's step at the median of its stage's replicas in that step
            mine = base_f[rank] * sum(w)
            med = median(base_f[q] * sum(seq[q % dp][step]) for q in same_stage[rank // dp])
            return [f * x * med / mine for x in w]
        return [f * x for x in w]

    def pp_group(replica: int) -> tuple[str, list[int]]:
        return str(1 + replica), [st * dp + replica for st in range(p)]

    def dp_group(stage: int) -> tuple[str, list[int]]:
        return str(1 + dp + stage), [stage * dp + d for d in range(dp)]

    def pg_config(rank: int) -> list[dict[str, Any]]:
        stage, replica = divmod(rank, dp)
        out = [_pg("0", list(range(n)), desc="default_pg")]
        out.append(_pg(*pp_group(replica), desc="PIPELINE_MODEL_PARALLEL_GROUP"))
        if dp > 1:
            out.append(_pg(*dp_group(stage), desc="DATA_PARALLEL_GROUP"))
        if tied_embeddings and stage in (0, p - 1):
            out.append(_pg(str(1 + dp + p + replica), [replica, (p - 1) * dp + replica], desc="EMBEDDING_GROUP"))
        return out

    def program(sim: RankSim) -> Program:
        s, d = divmod(sim.rank, dp)
        pp_name, pp_ranks = pp_group(d)
        dp_name, dp_ranks = dp_group(s)
        f = compute_factors(sim.fixes)[sim.rank]
        half = DOUBLE_MICROBATCHES in sim.fixes  # twice the microbatches, each half the work
        m = microbatches * 2 if half else microbatches
        share = 0.5 if half else 1.0
        order = stage_order(schedule, s, p, m, chunks)

        def xfer(
            kind: str, to_stage: int, key: tuple[Any, ...], timer: str
        ) -> Generator[Wait, None, tuple[float, float]]:
            peer = (to_stage % p) * dp + d
            return comm.p2p(
                sim,
                kind,
                peer,
                key,
                nelems=int(nelems * share),
                transfer_us=xfer_us * share,
                ranks=pp_ranks,
                pg=pp_name,
                timer=("pp-comm", timer, {"step": key[1]}),
            )

        def exchange(
            to_stage: int, send_key: tuple[Any, ...], recv_key: tuple[Any, ...], names: tuple[str, str]
        ) -> Generator[Wait, None, tuple[float, float]]:
            return comm.exchange(
                sim,
                (to_stage % p) * dp + d,
                send_key,
                recv_key,
                transfer_us=xfer_us * share,
                timers=(("pp-comm", names[0], {"step": send_key[1]}), ("pp-comm", names[1], {"step": recv_key[1]})),
            )

        batch = batched_p2p and v == 1
        for step in range(steps):
            mb_f = work_factors(sim.fixes, sim.rank, step)
            with sim.step(step + 1):
                if s == 0:
                    wl.input_batch(sim, 4 << 20)
                if dp > 1 and grad_mb > 0 and dist_opt:
                    # the parameters the last optimizer step updated, gathered before use
                    _, end = yield from sharded(
                        sim,
                        "all_gather",
                        ("params", step),
                        grad_mb * 1e6,
                        dp_ranks,
                        link_gbs,
                        pg=dp_name,
                        pg_desc="DATA_PARALLEL_GROUP",
                        timer=("dp-comm", "params-all-gather", {"step": step + 1, "model_chunk": 0}),
                    )
                    sim.deps.append((end, Cause.COMMUNICATION))
                sim.phase = "pipeline"
                # A send waiting to be batched with the next receive from the same peer.
                pending: tuple[int, tuple[Any, ...], str] | None = None

                def flush() -> Generator[Wait, None, None]:
                    nonlocal pending
                    if pending is not None:
                        to, key, name = pending
                        pending = None
                        yield from xfer("send", to, key, name)

                def receive(frm: int, key: tuple[Any, ...], name: str) -> Generator[Wait, None, None]:
                    nonlocal pending
                    if pending is not None and pending[0] % p == frm % p:
                        to, send_key, send_name = pending
                        pending = None
                        yield from exchange(to, send_key, key, (send_name, name))
                        return
                    yield from flush()
                    yield from xfer("recv", frm, key, name)

                def send(to: int, key: tuple[Any, ...], name: str) -> Generator[Wait, None, None]:
                    nonlocal pending
                    yield from flush()
                    if batch:
                        pending = (to, key, name)
                    else:
                        yield from xfer("send", to, key, name)

                for work in order:
                    vs = work.chunk * p + s
                    first, last = vs == 0, vs == p * v - 1
                    ids = {"step": step + 1, "model_chunk": work.chunk, "mb_id": work.mb}
                    # a half microbatch carries half of its microbatch's sequences
                    chunk_us = stage_ms * 1e3 * mb_f[work.mb // 2 if half else work.mb] * share / v
                    if work.kind == "F":
                        if not first:
                            yield from receive(vs - 1, ("F", step + 1, work.mb, vs), "forward-recv")
                        else:
                            yield from flush()
                        start, end = _chunk_kernels(
                            sim, chunk_us, backward=False, with_loss=last, annotate=annotate
                        )
                        sim.timer("compute", "forward-compute", start, end, **ids)
                        if not last:
                            yield from send(vs + 1, ("F", step + 1, work.mb, vs + 1), "forward-send")
                    else:
                        if not last:
                            yield from receive(vs + 1, ("B", step + 1, work.mb, vs), "backward-recv")
                        else:
                            yield from flush()
                        start, end = _chunk_kernels(
                            sim, chunk_us, backward=True, with_loss=False, annotate=annotate
                        )
                        sim.timer("compute", "backward-compute", start, end, **ids)
                        if not first:
                            yield from send(vs - 1, ("B", step + 1, work.mb, vs - 1), "backward-send")
                yield from flush()
                # the drain: this stage is done; the pipeline is not until every stage is
                sim.mark(("pipeline_end", d, step), sim.stream_free[COMPUTE_STREAM])
                sim.phase = "optimizer"
                if tied_embeddings and p > 1 and s in (0, p - 1):
                    # the tied input/output embeddings' gradients, between the first and last stage
                    embed = [d, (p - 1) * dp + d]
                    _, end = yield from allreduce(
                        sim,
                        ("embedding", step),
                        0.2 * grad_mb * 1e6,
                        embed,
                        link_gbs,
                        pg=str(1 + dp + p + d),
                        pg_desc="EMBEDDING_GROUP",
                        timer=("dp-comm", "embedding-grads-all-reduce", {"step": step + 1}),
                    )
                    sim.deps.append((end, Cause.COMMUNICATION))
                if dp > 1 and grad_mb > 0:
                    if dist_opt:
                        _, end = yield from sharded(
                            sim,
                            "reduce_scatter",
                            ("grads", step),
                            grad_mb * 1e6,
                            dp_ranks,
                            link_gbs,
                            pg=dp_name,
                            pg_desc="DATA_PARALLEL_GROUP",
                            timer=("dp-comm", "grads-reduce-scatter", {"step": step + 1, "model_chunk": 0}),
                        )
                    else:
                        _, end = yield from allreduce(
                            sim,
                            ("grads", step),
                            grad_mb * 1e6,
                            dp_ranks,
                            link_gbs,
                            pg=dp_name,
                            pg_desc="DATA_PARALLEL_GROUP",
                            timer=("dp-comm", "all-grads-sync", {"step": step + 1}),
                        )
                    sim.deps.append((end, Cause.COMMUNICATION))
                # gradient-norm clipping: an all-reduce over the pipeline group (the
                # distributed optimizer's shards: over every rank), then .item()
                _, end = yield from allreduce(
                    sim,
                    ("gradnorm", step),
                    4,
                    list(range(n)) if dist_opt else pp_ranks,
                    link_gbs,
                    pg="0" if dist_opt else pp_name,
                    pg_desc="default_pg" if dist_opt else "PIPELINE_MODEL_PARALLEL_GROUP",
                    timer=("dp-comm", "optimizer-clip-main-grad", {"step": step + 1}),
                )
                sim.deps.append((end, Cause.COMMUNICATION))
                sim.item()
                opt_f = mean(base_f) if NO_VARIATION in sim.fixes else f
                start, end = wl.optimizer_step(sim, stage_ms * 1e3 * 0.2 * opt_f)
                sim.timer("compute", "optimizer", start, end, step=step + 1)
                wl.zero_grad(sim)

    def post(sims: Sequence[RankSim]) -> None:
        """Drain bubble: from a stage's last pipeline compute to the pipeline's last one."""
        for key, ends in sims[0].job.marks.items():
            if key[0] != "pipeline_end":
                continue
            group_end = max(ends.values())
            for rank, end in ends.items():
                sims[rank].claim(Cause.PIPELINE_BUBBLE, end, group_end)

    base = compute_factors(frozenset())
    slow_ranks = sorted({*same_stage[slow_stage]} if slow_stage >= 0 else set()) if slowdown != 1 else []
    if slow_rank >= 0 and slowdown != 1 and slow_rank not in slow_ranks:
        slow_ranks = sorted([*slow_ranks, slow_rank])
    by_fix = {w: compute_factors(frozenset({w})) for w in (BALANCED_STAGES, PEER_MEDIAN_COMPUTE)}
    balanced = differs(base, by_fix[BALANCED_STAGES])
    varies = seq_cv > 0
    peers = differs(base, by_fix[PEER_MEDIAN_COMPUTE]) or (varies and dp > 1)
    culprits = {w: faster(base, fixed) for w, fixed in by_fix.items()}

    def step_work(fixes: frozenset[str]) -> list[list[float]]:
        return [[sum(work_factors(fixes, r, t)) for t in range(steps)] for r in range(n)]

    if varies:
        now = step_work(frozenset())
        for w in (PEER_MEDIAN_COMPUTE, BALANCED_BATCHES, NO_VARIATION):
            after = step_work(frozenset({w}))
            culprits[w] = sorted(r for r in range(n) if any(b < a * 0.99 for a, b in zip(now[r], after[r])))
    elif balanced or peers:
        culprits[NO_VARIATION] = faster(base, [mean_work] * n)
    # The fixes a user would make: a slow GPU's (peers), the stages', and for data that
    # varies the batches' (the per-step peer median is not a fix one can apply to data).
    slow_gpu = differs(base, by_fix[PEER_MEDIAN_COMPUTE])
    intended: tuple[str, ...] = tuple(
        w
        for w, on in ((BALANCED_STAGES, balanced), (PEER_MEDIAN_COMPUTE, slow_gpu), (BALANCED_BATCHES, varies))
        if on
    ) or (DOUBLE_MICROBATCHES,)
    return Plan(
        n,
        program,
        {
            "intended": "pipeline_bubble",
            "culprit_ranks": slow_ranks,
            "theoretical_bubble_fraction": round(theoretical_bubble(schedule, p, microbatches, v), 6),
            "compute_factors": [round(x, 6) for x in base],
        },
        pg_config=pg_config,
        post=post,
        whatifs=(DOUBLE_MICROBATCHES,)
        + ((BALANCED_STAGES,) if balanced else ())
        + ((PEER_MEDIAN_COMPUTE,) if peers else ())
        + ((BALANCED_BATCHES,) if varies else ())
        + ((NO_VARIATION,) if varies or balanced or peers else ()),
        intended_whatifs=intended,
        whatif_culprits=culprits,
        parallel={"pp_size": p, "dp_size": dp, "tp_size": tp, "vpp_size": v},
    )


# Knobs of the presets that stand for the two large 3D-parallel jobs of issue 19.
SLOW_WORKER_KNOBS: dict[str, Any] = {
    "batched_p2p": True,
    "stages": 4,
    "dp": 4,
    "tp": 4,
    "microbatches": 32,
    "slow_rank": 0,
    "slowdown": 2.5,
    "dist_opt": True,
    "tied_embeddings": True,
}
UNEVEN_DATA_KNOBS: dict[str, Any] = {
    "batched_p2p": True,
    "stages": 2,
    "dp": 32,
    "microbatches": 8,
    "steps": 3,
    "seq_cv": 0.3,
    "slow_stage": 1,
    "slowdown": 1.5,
    "dist_opt": True,
    "tied_embeddings": True,
}


def megatron_slow_worker(**knobs: Any) -> Plan:
    """PP 4 x DP 4 x TP 4 (the timeline holds TP rank 0 of each position), 32 microbatches: one
    worker (DP 0, stage 0) computes 2.5x slower; the other replicas finish early and wait,
    untimed, before the end-of-step collectives."""
    return pipeline(**{**SLOW_WORKER_KNOBS, **knobs})


def megatron_uneven_data(**knobs: Any) -> Plan:
    """PP 2 x DP 32: sequence lengths vary from batch to batch (each microbatch's work, CV 0.3),
    so the slowest replica changes every step, and the last stage (loss, head) has 1.5x the
    work of the first."""
    return pipeline(**{**UNEVEN_DATA_KNOBS, **knobs})


def _pg(name: str, ranks: list[int], desc: str = "undefined") -> dict[str, Any]:
    return {
        "pg_name": name,
        "pg_desc": desc,
        "backend_config": "cuda:nccl",
        "pg_size": len(ranks),
        "ranks": ranks,
    }


def _chunk_kernels(
    sim: RankSim, chunk_us: float, *, backward: bool, with_loss: bool, annotate: bool
) -> tuple[float, float]:
    """The kernels of one model chunk for one microbatch (two layers' worth), inside a
    ``forward_step`` / ``backward_step`` range when ``annotate``; returns their device span."""
    name = "backward_step" if backward else "forward_step"
    spans = []
    with sim.op(name, cat="user_annotation") if annotate else nullcontext():
        for _ in range(2):
            if backward:
                spans.append(wl.backward_layer(sim, chunk_us / 2))
            else:
                spans.append(wl.forward_layer(sim, chunk_us / 2))
        if with_loss:
            spans.append(wl.loss(sim, 20.0))
    return spans[0][0], spans[-1][1]


def rl_post_training(
    *,
    ranks: int = 2,
    steps: int = 3,
    layers: int = 4,
    tokens_min: int = 64,
    tokens_max: int = 512,
    decode_us: float = 60.0,
    reward_ms: float = 15.0,
    layer_ms: float = 2.0,
    grad_mb: float = 50.0,
    link_gbs: float = 100.0,
    seed: int = 0,
) -> Plan:
    """Synchronous RL post-training: rollout, gather, reward on the host, then training.

    Each rank generates rollouts of a different length; the experience all-gather makes
    every rank wait for the longest one (the long tail of generation), then the device
    idles while the host scores rewards. The samples of a GPU monitor show it.
    """
    check(ranks >= 2, "rl_post_training needs at least 2 ranks")
    check(0 < tokens_min <= tokens_max, "need 0 < tokens_min <= tokens_max")
    rng = random.Random(seed * 17 + 3)
    tokens = [[rng.randint(tokens_min, tokens_max) for _ in range(ranks)] for _ in range(steps)]
    # peer_median_compute: every rank generates the step's median rollout length
    medians = [round(median(row)) for row in tokens]

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                with sim.op("rollout", cat="user_annotation"):
                    n_tokens = medians[s] if PEER_MEDIAN_COMPUTE in sim.fixes else tokens[s][sim.rank]
                    for _ in range(n_tokens):
                        with sim.op("decode_step", cat="user_annotation"):
                            for _ in range(layers):
                                sim.aten("aten::linear", wl.GEMM, decode_us * 0.6, op_us=4.0)
                                sim.aten(
                                    "aten::_scaled_dot_product_flash_attention",
                                    wl.FLASH_FWD,
                                    decode_us * 0.4,
                                    op_us=4.0,
                                )
                    _, end = yield from comm.collective(
                        sim,
                        ("experience", s),
                        coll="allgather",
                        op_name="c10d::_allgather_base_",
                        annotation="nccl:_all_gather_base",
                        kernel_name=ALLGATHER_KERNEL,
                        nelems=1 << 20,
                        dtype="BFloat16",
                        ranks=list(range(ranks)),
                        transfer_us=60.0,
                    )
                    sim.deps.append((end, Cause.COMMUNICATION))
                    sim.item()  # the rollouts go to the host for scoring
                with sim.op("compute_reward", cat="user_annotation"):
                    # .item() above held the host until the rollout was done; without it the
                    # host would have scored the rewards while the device still generated
                    # (the no_sync what-if recovers this idle time), so the device's wait
                    # during the scoring is the sync's, up to how long the sync blocked.
                    sim.idle(sim.jit(reward_ms * 1e3))
                with sim.op("train", cat="user_annotation"):
                    yield from dp_step(
                        sim,
                        s,
                        ranks=ranks,
                        layers=layers,
                        layer_us=layer_ms * 1e3,
                        grad_mb=grad_mb,
                        buckets=2,
                        link_gbs=link_gbs,
                    )

    slowest = [max(range(ranks), key=lambda r: row[r]) for row in tokens]
    return Plan(
        ranks,
        program,
        {
            "intended": "straggler",
            "culprit_ranks": sorted(set(slowest)),
            "slowest_rank_per_step": slowest,
            "rollout_tokens": tokens,
        },
        session=True,
        whatifs=(PEER_MEDIAN_COMPUTE,)
        if any(differs(row, [m] * ranks) for row, m in zip(tokens, medians))
        else (),
        intended_whatifs=(PEER_MEDIAN_COMPUTE,),
        whatif_culprits={
            PEER_MEDIAN_COMPUTE: sorted(
                {r for row, m in zip(tokens, medians) for r in faster(row, [m] * ranks)}
            )
        },
    )
