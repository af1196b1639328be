"""Data-parallel scenarios of many ranks: DDP on fast or slow links, a straggler, a rank with a
slow host, data-dependent imbalance, synchronous RL post-training.

Each function takes the scenario's knobs (units in their names, meanings in
:data:`gpuprof.simulate.scenarios.KNOB_HELP`) and returns a :class:`Plan`; every rank runs
the same :class:`~gpuprof.simulate.workload.DataParallel` step, its compute scaled by what
the scenario makes uneven.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from statistics import median
from typing import Any

from gpuprof.model.report import Cause
from gpuprof.simulate import comm
from gpuprof.simulate import workload as wl
from gpuprof.simulate.engine import Program, Timing
from gpuprof.simulate.fixes import (
    DOUBLE_BANDWIDTH,
    OVERLAP_COLLECTIVES,
    PEER_MEDIAN_COMPUTE,
    PEER_MEDIAN_HOST,
    differs,
    faster,
    others_median,
)
from gpuprof.simulate.plan import Plan, check
from gpuprof.simulate.rank import RankSim
from gpuprof.simulate.scenario import each_step
from gpuprof.simulate.workload import ALLGATHER_KERNEL, DataParallel, ring_us


def data_parallel(
    *, ranks: int = 4, steps: int = 3, layers: int = 8, layer_ms: float = 1.0,
    grad_mb: float = 200.0, buckets: int = 4, link_gbs: float = 5.0,
) -> Plan:  # fmt: skip
    """DDP with bucketed gradient all-reduce; on slow links the all-reduce is exposed."""
    check(ranks >= 2, "data_parallel needs at least 2 ranks")
    check(link_gbs > 0 and grad_mb > 0, "link_gbs and grad_mb must be positive")
    ddp = DataParallel(ranks, layers, layer_ms * 1e3, grad_mb, buckets, link_gbs)
    comm_total = ring_us(grad_mb * 1e6, ranks, link_gbs)
    backward_us = 2 * layers * layer_ms * 1e3
    exposed = comm_total > 0.6 * backward_us
    return Plan(
        ranks,
        each_step(steps, ddp.step),
        {"intended": "communication" if exposed else None},
        intended_whatifs=(OVERLAP_COLLECTIVES, DOUBLE_BANDWIDTH) if exposed else (),
    )


def straggler(
    *, ranks: int = 4, steps: int = 3, layers: int = 8, layer_ms: float = 1.0,
    slow_rank: int = 2, slowdown: float = 1.5,
    grad_mb: float = 100.0, buckets: int = 4, link_gbs: float = 100.0,
) -> Plan:  # fmt: skip
    """One rank computes slower (thermal throttling, a bad GPU); the others wait for it."""
    check(ranks >= 2, "straggler needs at least 2 ranks")
    check(0 <= slow_rank < ranks, f"slow_rank must be in 0..{ranks - 1}")
    check(slowdown >= 1.0, "slowdown must be at least 1")
    ddp = DataParallel(ranks, layers, layer_ms * 1e3, grad_mb, buckets, link_gbs)
    factors = [slowdown if r == slow_rank else 1.0 for r in range(ranks)]
    fixed = others_median(factors, [list(range(ranks))])

    def work(sim: RankSim, s: int) -> Program:
        return ddp.step(sim, s, (fixed if PEER_MEDIAN_COMPUTE in sim.fixes else factors)[sim.rank])

    return Plan(
        ranks,
        each_step(steps, work),
        {"intended": "straggler", "culprit_ranks": [slow_rank]},
        whatifs=(PEER_MEDIAN_COMPUTE,) if differs(factors, fixed) else (),
        intended_whatifs=(PEER_MEDIAN_COMPUTE,),
        whatif_culprits={PEER_MEDIAN_COMPUTE: faster(factors, fixed)},
    )


def slow_host(
    *, ranks: int = 4, steps: int = 3, layers: int = 8, layer_ms: float = 1.0,
    op_us: float = 100.0, backward_op_us: float = 20.0, slow_host_rank: int = 3, host_slowdown: float = 2.0,
    grad_mb: float = 50.0, buckets: int = 4, link_gbs: float = 100.0,
) -> Plan:  # fmt: skip
    """One rank's host is slower (a busier or throttled CPU, a noisy neighbour): its Python,
    framework operators and launch calls take ``host_slowdown`` times as long, so its device
    waits for launches and it arrives last at every collective; the others wait for it.

    The forward is Python-heavy (``op_us`` of host time per operator), the backward runs in
    autograd's C++ engine (``backward_op_us``): the slow host falls behind its device in the
    forward and the backward's collectives wait for it."""
    check(ranks >= 2, "slow_host needs at least 2 ranks")
    check(-1 <= slow_host_rank < ranks, f"slow_host_rank must be -1 or in 0..{ranks - 1}")
    check(
        host_slowdown > 0 and op_us >= 0 and backward_op_us >= 0,
        "need host_slowdown > 0, op_us >= 0 and backward_op_us >= 0",
    )
    ddp = DataParallel(
        ranks, layers, layer_ms * 1e3, grad_mb, buckets, link_gbs, backward_op_us=backward_op_us
    )
    factors = [host_slowdown if r == slow_host_rank else 1.0 for r in range(ranks)]
    # peer_median_host: every rank's host no slower than the median of the other ranks'
    fixed = others_median(factors, [list(range(ranks))])
    steps_program = each_step(steps, ddp.step)

    def program(sim: RankSim) -> Program:
        sim.host_factor = (fixed if PEER_MEDIAN_HOST in sim.fixes else factors)[sim.rank]
        yield from steps_program(sim)

    return Plan(
        ranks,
        program,
        {"intended": "straggler", "culprit_ranks": [slow_host_rank] if differs(factors, fixed) else []},
        timing=Timing(op_us=op_us),
        whatifs=(PEER_MEDIAN_HOST,) if differs(factors, fixed) else (),
        intended_whatifs=(PEER_MEDIAN_HOST,),
        whatif_culprits={PEER_MEDIAN_HOST: faster(factors, fixed)},
    )


def imbalance(
    *, ranks: int = 4, steps: int = 4, layers: int = 8, layer_ms: float = 1.0,
    seq_min: int = 512, seq_max: int = 4096,
    grad_mb: float = 100.0, buckets: int = 4, link_gbs: float = 100.0, seed: int = 0,
) -> Plan:  # fmt: skip
    """Data-dependent imbalance: each rank gets a different sequence length every step."""
    check(ranks >= 2, "imbalance needs at least 2 ranks")
    check(0 < seq_min <= seq_max, "need 0 < seq_min <= seq_max")
    ddp = DataParallel(ranks, layers, layer_ms * 1e3, grad_mb, buckets, link_gbs)
    rng = random.Random(seed * 31 + 5)
    seqs = [[rng.randint(seq_min, seq_max) for _ in range(ranks)] for _ in range(steps)]
    middle = (seq_min + seq_max) / 2
    # peer_median_compute: every rank's step no longer than the step's median work over the
    # other ranks of the group
    medians = [_others(row) for row in seqs]

    def work(sim: RankSim, s: int) -> Program:
        seq = min(medians[s][sim.rank], seqs[s][sim.rank]) if PEER_MEDIAN_COMPUTE in sim.fixes else seqs[s][sim.rank]
        return ddp.step(sim, s, seq / middle)

    return _uneven_steps(ranks, each_step(steps, work), seqs, medians, "seq_lens")


ATTENTION = "aten::_scaled_dot_product_flash_attention"


def rl_post_training(
    *, ranks: int = 2, steps: int = 3, layers: int = 4,
    tokens_min: int = 64, tokens_max: int = 512, decode_us: float = 60.0, reward_ms: float = 15.0,
    layer_ms: float = 2.0, grad_mb: float = 50.0, link_gbs: float = 100.0, seed: int = 0,
) -> Plan:  # fmt: skip
    """Synchronous RL post-training: rollout, gather, reward on the host, then training.

    Each rank generates rollouts of a different length; the experience all-gather makes
    every rank wait for the longest one (the long tail of generation), then the device
    idles while the host scores rewards. The samples of a GPU monitor show it.
    """
    check(ranks >= 2, "rl_post_training needs at least 2 ranks")
    check(0 < tokens_min <= tokens_max, "need 0 < tokens_min <= tokens_max")
    ddp = DataParallel(ranks, layers, layer_ms * 1e3, grad_mb, 2, link_gbs)
    rng = random.Random(seed * 17 + 3)
    tokens = [[rng.randint(tokens_min, tokens_max) for _ in range(ranks)] for _ in range(steps)]
    # peer_median_compute: no rank generates more than the step's median rollout length of
    # the other ranks
    medians = [[round(m) for m in _others(row)] for row in tokens]

    def work(sim: RankSim, s: int) -> Program:
        with sim.op("rollout", cat="user_annotation"):
            n_tokens = tokens[s][sim.rank]
            if PEER_MEDIAN_COMPUTE in sim.fixes:
                n_tokens = min(medians[s][sim.rank], n_tokens)
            for _ in range(n_tokens):
                with sim.op("decode_step", cat="user_annotation"):
                    for _ in range(layers):
                        sim.aten("aten::linear", wl.GEMM, decode_us * 0.6, op_us=4.0)
                        sim.aten(ATTENTION, wl.FLASH_FWD, decode_us * 0.4, op_us=4.0)
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
            yield from ddp.step(sim, s)

    return _uneven_steps(ranks, each_step(steps, work), tokens, medians, "rollout_tokens", session=True)


def _others(row: Sequence[float]) -> list[float]:
    """Per rank, the median of the other ranks' values."""
    return [median([x for j, x in enumerate(row) if j != i]) for i in range(len(row))]


def _uneven_steps(
    ranks: int,
    program: Callable[[RankSim], Program],
    work: Sequence[Sequence[float]],
    medians: Sequence[Sequence[float]],
    name: str,
    **plan: Any,
) -> Plan:
    """The plan of a job whose ranks get different work every step (``work[step][rank]``,
    written to the ground truth as ``name``): the slowest rank changes from step to step,
    and ``peer_median_compute`` gives every rank above the step's median of the other ranks
    (``medians[step][rank]``) that median."""
    slowest = [max(range(ranks), key=lambda r: row[r]) for row in work]
    fixed = [[min(m, x) for m, x in zip(ms, row)] for ms, row in zip(medians, work)]
    culprits = sorted({r for row, f in zip(work, fixed) for r in faster(row, f)})
    return Plan(
        ranks,
        program,
        {
            "intended": "straggler",
            "culprit_ranks": sorted(set(slowest)),
            "slowest_rank_per_step": slowest,
            name: work,
        },
        whatifs=(PEER_MEDIAN_COMPUTE,) if any(differs(row, f) for row, f in zip(work, fixed)) else (),
        intended_whatifs=(PEER_MEDIAN_COMPUTE,),
        whatif_culprits={PEER_MEDIAN_COMPUTE: culprits},
        **plan,
    )
