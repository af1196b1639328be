"""Scenarios of many ranks: data parallel, stragglers, imbalance, pipelines, RL post-training.

Each function takes the scenario's knobs (units in their names, meanings in
:data:`gpuprof.simulate.scenarios.KNOB_HELP`) and returns a :class:`Plan`.
"""

from __future__ import annotations

import random
from collections.abc import Generator, Sequence
from typing import Any

from gpuprof.model.report import Cause
from gpuprof.simulate import comm
from gpuprof.simulate import workload as wl
from gpuprof.simulate.engine import COMPUTE_STREAM, Program, RankSim, Wait
from gpuprof.simulate.plan import Plan, check
from gpuprof.simulate.schedules import SCHEDULES, stage_order, theoretical_bubble
from gpuprof.simulate.workload import ALLGATHER_KERNEL, allreduce, dp_step, ring_us


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
    return Plan(ranks, program, {"intended": "communication" if comm_total > 0.6 * backward_us else None})


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

    def program(sim: RankSim) -> Program:
        f = slowdown if sim.rank == slow_rank else 1.0
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

    return Plan(ranks, program, {"intended": "straggler", "culprit_ranks": [slow_rank]})


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
    mean = (seq_min + seq_max) / 2

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                f = seqs[s][sim.rank] / mean
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
    slowdown: float = 1.5,
) -> Plan:
    """Pipeline parallelism (times data parallelism with dp > 1); optionally one slow stage.

    Ranks are laid out as Megatron-LM does with no tensor parallelism: rank = stage * dp +
    replica. After the pipeline flush each stage all-reduces its gradients over its
    data-parallel group, then the pipeline group all-reduces the gradient norm and reads it
    with ``.item()`` before the optimizer step. A slow stage is slow in replica 0 only.
    """
    check(schedule in SCHEDULES, f"schedule must be one of {', '.join(SCHEDULES)}")
    check(stages >= 2 and microbatches >= 1 and dp >= 1, "need stages >= 2, microbatches >= 1, dp >= 1")
    v = chunks if schedule == "interleaved" else 1
    check(
        schedule != "interleaved" or (chunks >= 2 and microbatches % stages == 0),
        "interleaved needs chunks >= 2 and microbatches divisible by stages",
    )
    check(-1 <= slow_stage < stages, f"slow_stage must be -1 or in 0..{stages - 1}")
    p = stages
    xfer_us = act_mb * 1e6 / (link_gbs * 1e3)
    nelems = int(act_mb * 1e6 // 2)

    def pp_group(replica: int) -> tuple[str, list[int]]:
        return str(1 + replica), [st * dp + replica for st in range(p)]

    def dp_group(stage: int) -> tuple[str, list[int]]:
        return str(1 + dp + stage), [stage * dp + d for d in range(dp)]

    def pg_config(rank: int) -> list[dict[str, Any]]:
        stage, replica = divmod(rank, dp)
        out = [_pg("0", list(range(p * dp)), desc="default_pg")]
        out.append(_pg(*pp_group(replica), desc="PIPELINE_MODEL_PARALLEL_GROUP"))
        if dp > 1:
            out.append(_pg(*dp_group(stage), desc="DATA_PARALLEL_GROUP"))
        return out

    def program(sim: RankSim) -> Program:
        s, d = divmod(sim.rank, dp)
        pp_name, pp_ranks = pp_group(d)
        f = slowdown if (s == slow_stage and d == 0) else 1.0
        chunk_us = stage_ms * 1e3 * f / v
        order = stage_order(schedule, s, p, microbatches, chunks)

        def xfer(
            kind: str, to_stage: int, key: tuple[Any, ...]
        ) -> Generator[Wait, None, tuple[float, float]]:
            peer = (to_stage % p) * dp + d
            return comm.p2p(
                sim, kind, peer, key, nelems=nelems, transfer_us=xfer_us, ranks=pp_ranks, pg=pp_name
            )

        for step in range(steps):
            with sim.step(step + 1):
                if s == 0:
                    wl.input_batch(sim, 4 << 20)
                sim.phase = "pipeline"
                for work in order:
                    vs = work.chunk * p + s
                    first, last = vs == 0, vs == p * v - 1
                    if work.kind == "F":
                        if not first:
                            yield from xfer("recv", vs - 1, ("F", step, work.mb, vs))
                        with sim.op("forward_step", cat="user_annotation"):
                            _chunk_kernels(sim, chunk_us, backward=False, with_loss=last)
                        if not last:
                            yield from xfer("send", vs + 1, ("F", step, work.mb, vs + 1))
                    else:
                        if not last:
                            yield from xfer("recv", vs + 1, ("B", step, work.mb, vs))
                        with sim.op("backward_step", cat="user_annotation"):
                            _chunk_kernels(sim, chunk_us, backward=True, with_loss=False)
                        if not first:
                            yield from xfer("send", vs - 1, ("B", step, work.mb, vs - 1))
                # the drain: this stage is done; the pipeline is not until every stage is
                sim.mark(("pipeline_end", d, step), sim.stream_free[COMPUTE_STREAM])
                sim.phase = "optimizer"
                if dp > 1 and grad_mb > 0:
                    dp_name, dp_ranks = dp_group(s)
                    _, end = yield from allreduce(
                        sim,
                        ("grads", step),
                        grad_mb * 1e6,
                        dp_ranks,
                        link_gbs,
                        pg=dp_name,
                        pg_desc="DATA_PARALLEL_GROUP",
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
                )
                sim.deps.append((end, Cause.COMMUNICATION))
                sim.item()
                wl.optimizer_step(sim, stage_ms * 1e3 * 0.2)
                wl.zero_grad(sim)

    def post(sims: Sequence[RankSim]) -> None:
        """Drain bubble: from a stage's last pipeline compute to the pipeline's last one."""
        for key, ends in sims[0].job.marks.items():
            if key[0] != "pipeline_end":
                continue
            group_end = max(ends.values())
            for rank, end in ends.items():
                sims[rank].claim(Cause.PIPELINE_BUBBLE, end, group_end)

    culprits = [slow_stage * dp] if slow_stage >= 0 else []
    return Plan(
        p * dp,
        program,
        {
            "intended": "pipeline_bubble",
            "culprit_ranks": culprits,
            "theoretical_bubble_fraction": round(theoretical_bubble(schedule, p, microbatches, v), 6),
        },
        pg_config=pg_config,
        post=post,
    )


def _pg(name: str, ranks: list[int], desc: str = "undefined") -> dict[str, Any]:
    return {
        "pg_name": name,
        "pg_desc": desc,
        "backend_config": "cuda:nccl",
        "pg_size": len(ranks),
        "ranks": ranks,
    }


def _chunk_kernels(sim: RankSim, chunk_us: float, *, backward: bool, with_loss: bool) -> None:
    """The kernels of one model chunk for one microbatch (two layers' worth)."""
    for _ in range(2):
        if backward:
            wl.backward_layer(sim, chunk_us / 2)
        else:
            wl.forward_layer(sim, chunk_us / 2)
    if with_loss:
        wl.loss(sim, 20.0)


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

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                with sim.op("rollout", cat="user_annotation"):
                    for _ in range(tokens[s][sim.rank]):
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
                    sim.idle(sim.jit(reward_ms * 1e3))
                    # The sync above returned at once; what starves the device now is
                    # Python scoring rewards, which is host time, not synchronization.
                    sim.label = Cause.HOST
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
    )
