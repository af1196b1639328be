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
from gpuprof.simulate.engine import COMPUTE_STREAM, Program, RankSim, Wait
from gpuprof.simulate.fixes import (
    BALANCED_STAGES,
    DOUBLE_BANDWIDTH,
    DOUBLE_MICROBATCHES,
    OVERLAP_COLLECTIVES,
    PEER_MEDIAN_COMPUTE,
    differs,
    faster,
    peer_median,
)
from gpuprof.simulate.plan import Plan, check
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
    steps: int = 2,
    stage_ms: float = 1.0,
    act_mb: float = 4.0,
    grad_mb: float = 50.0,
    link_gbs: float = 200.0,
    slow_stage: int = -1,
    slow_rank: int = -1,
    slowdown: float = 1.5,
    replica_spread: float = 0.0,
    annotate: bool = True,
    dist_opt: bool = False,
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
        spd = peer_median(speed, same_stage) if PEER_MEDIAN_COMPUTE in fixes else speed
        return [work[r // dp] * spd[r] for r in range(n)]

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
        return out

    def program(sim: RankSim) -> Program:
        s, d = divmod(sim.rank, dp)
        pp_name, pp_ranks = pp_group(d)
        dp_name, dp_ranks = dp_group(s)
        f = compute_factors(sim.fixes)[sim.rank]
        half = DOUBLE_MICROBATCHES in sim.fixes  # twice the microbatches, each half the work
        m = microbatches * 2 if half else microbatches
        share = 0.5 if half else 1.0
        chunk_us = stage_ms * 1e3 * f * share / v
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

        for step in range(steps):
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
                for work in order:
                    vs = work.chunk * p + s
                    first, last = vs == 0, vs == p * v - 1
                    ids = {"step": step + 1, "model_chunk": work.chunk, "mb_id": work.mb}
                    if work.kind == "F":
                        if not first:
                            yield from xfer("recv", vs - 1, ("F", step + 1, work.mb, vs), "forward-recv")
                        start, end = _chunk_kernels(
                            sim, chunk_us, backward=False, with_loss=last, annotate=annotate
                        )
                        sim.timer("compute", "forward-compute", start, end, **ids)
                        if not last:
                            yield from xfer("send", vs + 1, ("F", step + 1, work.mb, vs + 1), "forward-send")
                    else:
                        if not last:
                            yield from xfer("recv", vs + 1, ("B", step + 1, work.mb, vs), "backward-recv")
                        start, end = _chunk_kernels(
                            sim, chunk_us, backward=True, with_loss=False, annotate=annotate
                        )
                        sim.timer("compute", "backward-compute", start, end, **ids)
                        if not first:
                            yield from xfer("send", vs - 1, ("B", step + 1, work.mb, vs - 1), "backward-send")
                # the drain: this stage is done; the pipeline is not until every stage is
                sim.mark(("pipeline_end", d, step), sim.stream_free[COMPUTE_STREAM])
                sim.phase = "optimizer"
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
                # gradient-norm clipping: an all-reduce over the pipeline group, then .item()
                _, end = yield from allreduce(
                    sim,
                    ("gradnorm", step),
                    4,
                    pp_ranks,
                    link_gbs,
                    pg=pp_name,
                    pg_desc="PIPELINE_MODEL_PARALLEL_GROUP",
                    timer=("dp-comm", "optimizer-clip-main-grad", {"step": step + 1}),
                )
                sim.deps.append((end, Cause.COMMUNICATION))
                sim.item()
                start, end = wl.optimizer_step(sim, stage_ms * 1e3 * 0.2 * f)
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
    peers = differs(base, by_fix[PEER_MEDIAN_COMPUTE])
    intended: tuple[str, ...] = tuple(
        w for w, on in ((BALANCED_STAGES, balanced), (PEER_MEDIAN_COMPUTE, peers)) if on
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
        + ((PEER_MEDIAN_COMPUTE,) if peers else ()),
        intended_whatifs=intended,
        whatif_culprits={w: faster(base, fixed) for w, fixed in by_fix.items()},
        parallel={"pp_size": p, "dp_size": dp, "tp_size": 1, "vpp_size": v},
    )


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
