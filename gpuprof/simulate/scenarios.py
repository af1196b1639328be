"""The simulated scenarios: one function per kind of waste, taking real knobs.

Each function returns a :class:`Plan`: how many ranks, the program each rank runs, and
what the scenario is built to show (the expected top cause and the ranks where it
originates). Knobs are keyword arguments with defaults; their units are in their names
(``_ms``, ``_us``, ``_mb`` for megabytes, ``_gbs`` for gigabytes per second) and their
meaning in :data:`KNOB_HELP`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuprof.model.report import Cause
from gpuprof.simulate import workload as wl
from gpuprof.simulate.engine import (
    COMPUTE_STREAM,
    COPY_STREAM,
    Program,
    RankSim,
    SimulationError,
    Timing,
    Wait,
)
from gpuprof.simulate.schedules import SCHEDULES, stage_order, theoretical_bubble

ALLREDUCE_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALLGATHER_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass(frozen=True)
class Plan:
    world_size: int
    program: Callable[[RankSim], Program]
    expected: Mapping[str, Any] = field(default_factory=dict)
    timing: Timing = field(default_factory=Timing)
    wait_cause: Cause = Cause.STRAGGLER  # cause of waiting inside a collective for a late rank
    session: bool = False  # write a gpuprof session folder with NVML-like samples


KNOB_HELP: dict[str, str] = {
    "ranks": "number of ranks (GPUs), one trace each",
    "steps": "profiled training steps",
    "layers": "transformer layers of the model",
    "layer_ms": "forward time of one layer on one rank, ms (backward takes twice as long)",
    "layer_us": "forward time of one layer, microseconds",
    "op_us": "host (Python + framework) time per operator, microseconds",
    "grad_mb": "gradient bytes all-reduced per step, megabytes",
    "buckets": "DDP gradient buckets per step",
    "link_gbs": "link bandwidth between ranks, gigabytes per second",
    "stages": "pipeline stages (one rank each)",
    "microbatches": "microbatches per step",
    "schedule": "pipeline schedule: " + ", ".join(SCHEDULES),
    "chunks": "model chunks per stage (interleaved schedule only)",
    "stage_ms": "forward time of one microbatch on one stage, ms (backward twice as long)",
    "act_mb": "activation bytes sent between stages per microbatch, megabytes",
    "slow_stage": "pipeline stage that is slower (-1: none)",
    "slow_rank": "rank whose compute is slower",
    "slowdown": "compute time factor of the slow rank or stage",
    "seq_min": "shortest sequence length in a step's per-rank batches",
    "seq_max": "longest sequence length in a step's per-rank batches",
    "batch_ms": "time the DataLoader needs to produce one batch, ms",
    "items_per_layer": "`.item()` calls per layer in the forward pass",
    "flush": "empty the caching allocator each step (cudaFree + cudaMalloc retries)",
    "mallocs": "cudaMalloc calls per step after the flush",
    "offload_mb": "activation bytes offloaded to host per layer and fetched back in backward, megabytes",
    "pageable_mb": "input bytes copied from pageable host memory per step, megabytes",
    "tokens_min": "shortest rollout per rank per step, generated tokens",
    "tokens_max": "longest rollout per rank per step, generated tokens",
    "decode_us": "device time of one decode step of one layer, microseconds",
    "reward_ms": "host time scoring rollouts (device idle), ms",
}


# -- shared pieces ------------------------------------------------------------------------
def _ring_us(nbytes: float, ranks: int, link_gbs: float) -> float:
    """Ring all-reduce transfer time: each rank moves 2 (n-1)/n of the buffer."""
    return 20.0 + 2.0 * (ranks - 1) / ranks * nbytes / (link_gbs * 1e3)


def _allreduce(
    sim: RankSim, key: Any, nbytes: float, ranks: int, link_gbs: float
) -> Generator[Wait, None, tuple[float, float]]:
    return sim.collective(
        key,
        coll="allreduce",
        op_name="c10d::allreduce_",
        annotation="nccl:all_reduce",
        kernel_name=ALLREDUCE_KERNEL,
        nelems=int(nbytes // 2),
        dtype="BFloat16",
        ranks=list(range(ranks)),
        transfer_us=_ring_us(nbytes, ranks, link_gbs),
    )


def _dp_step(
    sim: RankSim,
    step: int,
    *,
    ranks: int,
    layers: int,
    layer_us: float,
    grad_mb: float,
    buckets: int,
    link_gbs: float,
    batch_wait_us: float = 40.0,
) -> Program:
    """One data-parallel training step: input, forward, backward with bucketed all-reduce."""
    wl.input_batch(sim, 8 << 20, wait_us=batch_wait_us)
    with sim.op("DistributedDataParallel.forward", cat="user_annotation"):
        for _ in range(layers):
            wl.forward_layer(sim, layer_us)
        wl.loss(sim)
    ends: list[float] = []
    per_bucket = max(1, layers // max(buckets, 1))
    pending = 0
    with sim.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"):
        for i in range(layers):
            wl.backward_layer(sim, layer_us)
            pending += 1
            if ranks > 1 and (pending == per_bucket or i == layers - 1):
                nbytes = grad_mb * 1e6 * pending / layers
                _, end = yield from _allreduce(sim, (step, i), nbytes, ranks, link_gbs)
                ends.append(end)
                pending = 0
    for end in ends:  # DDP waits for every bucket before the optimizer
        sim.deps.append((end, Cause.COMMUNICATION))
    wl.optimizer_step(sim, layer_us * 0.3 * layers / 4)
    wl.zero_grad(sim)
    sim.item()  # loss.item() for logging


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise SimulationError(message)


# -- scenarios ----------------------------------------------------------------------------
def healthy(
    *,
    ranks: int = 1,
    steps: int = 3,
    layers: int = 8,
    layer_ms: float = 1.5,
    link_gbs: float = 200.0,
    grad_mb: float = 100.0,
    buckets: int = 4,
) -> Plan:
    """A well-fed, compute-bound run: nothing worth fixing."""
    _check(ranks >= 1 and steps >= 1 and layers >= 1, "ranks, steps and layers must be at least 1")

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                yield from _dp_step(
                    sim,
                    s,
                    ranks=ranks,
                    layers=layers,
                    layer_us=layer_ms * 1e3,
                    grad_mb=grad_mb,
                    buckets=buckets,
                    link_gbs=link_gbs,
                )

    return Plan(ranks, program, {"intended": None})


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
    _check(ranks >= 2, "data_parallel needs at least 2 ranks")
    _check(link_gbs > 0 and grad_mb > 0, "link_gbs and grad_mb must be positive")

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                yield from _dp_step(
                    sim,
                    s,
                    ranks=ranks,
                    layers=layers,
                    layer_us=layer_ms * 1e3,
                    grad_mb=grad_mb,
                    buckets=buckets,
                    link_gbs=link_gbs,
                )

    comm_total = _ring_us(grad_mb * 1e6, ranks, link_gbs)
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
    _check(ranks >= 2, "straggler needs at least 2 ranks")
    _check(0 <= slow_rank < ranks, f"slow_rank must be in 0..{ranks - 1}")
    _check(slowdown >= 1.0, "slowdown must be at least 1")

    def program(sim: RankSim) -> Program:
        f = slowdown if sim.rank == slow_rank else 1.0
        for s in range(steps):
            with sim.step(s + 1):
                yield from _dp_step(
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
    import random

    _check(ranks >= 2, "imbalance needs at least 2 ranks")
    _check(0 < seq_min <= seq_max, "need 0 < seq_min <= seq_max")
    rng = random.Random(seed * 31 + 5)
    seqs = [[rng.randint(seq_min, seq_max) for _ in range(ranks)] for _ in range(steps)]
    mean = (seq_min + seq_max) / 2

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                f = seqs[s][sim.rank] / mean
                yield from _dp_step(
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
    steps: int = 2,
    stage_ms: float = 1.0,
    act_mb: float = 4.0,
    link_gbs: float = 200.0,
    slow_stage: int = -1,
    slowdown: float = 1.5,
) -> Plan:
    """Pipeline parallelism, one rank per stage; optionally one slow stage."""
    _check(schedule in SCHEDULES, f"schedule must be one of {', '.join(SCHEDULES)}")
    _check(stages >= 2 and microbatches >= 1, "need stages >= 2 and microbatches >= 1")
    v = chunks if schedule == "interleaved" else 1
    _check(
        schedule != "interleaved" or (chunks >= 2 and microbatches % stages == 0),
        "interleaved needs chunks >= 2 and microbatches divisible by stages",
    )
    _check(-1 <= slow_stage < stages, f"slow_stage must be -1 or in 0..{stages - 1}")
    p = stages
    xfer_us = act_mb * 1e6 / (link_gbs * 1e3)
    nelems = int(act_mb * 1e6 // 2)
    ranks = list(range(p))

    def program(sim: RankSim) -> Program:
        s = sim.rank
        f = slowdown if s == slow_stage else 1.0
        chunk_us = stage_ms * 1e3 * f / v
        order = stage_order(schedule, s, p, microbatches, chunks)
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
                            yield from sim.p2p(
                                "recv",
                                (vs - 1) % p,
                                ("F", step, work.mb, vs),
                                nelems=nelems,
                                transfer_us=xfer_us,
                                ranks=ranks,
                            )
                        with sim.op("forward_step", cat="user_annotation"):
                            _chunk_kernels(sim, chunk_us, backward=False, with_loss=last)
                        if not last:
                            yield from sim.p2p(
                                "send",
                                (vs + 1) % p,
                                ("F", step, work.mb, vs + 1),
                                nelems=nelems,
                                transfer_us=xfer_us,
                                ranks=ranks,
                            )
                    else:
                        if not last:
                            yield from sim.p2p(
                                "recv",
                                (vs + 1) % p,
                                ("B", step, work.mb, vs),
                                nelems=nelems,
                                transfer_us=xfer_us,
                                ranks=ranks,
                            )
                        with sim.op("backward_step", cat="user_annotation"):
                            _chunk_kernels(sim, chunk_us, backward=True, with_loss=False)
                        if not first:
                            yield from sim.p2p(
                                "send",
                                (vs - 1) % p,
                                ("B", step, work.mb, vs - 1),
                                nelems=nelems,
                                transfer_us=xfer_us,
                                ranks=ranks,
                            )
                sim.phase = "optimizer"
                # Gradient-norm clipping: an all-reduce over the pipeline group, then .item().
                # Early stages of the drain wait here for the last backward of stage 0.
                _, end = yield from _allreduce(sim, ("gradnorm", step), 4, p, link_gbs)
                sim.deps.append((end, Cause.COMMUNICATION))
                sim.item()
                wl.optimizer_step(sim, stage_ms * 1e3 * 0.2)
                wl.zero_grad(sim)

    culprits = [slow_stage] if slow_stage >= 0 else []
    return Plan(
        p,
        program,
        {
            "intended": "pipeline_bubble",
            "culprit_ranks": culprits,
            "theoretical_bubble_fraction": round(theoretical_bubble(schedule, p, microbatches, v), 6),
        },
        wait_cause=Cause.PIPELINE_BUBBLE,
    )


def _chunk_kernels(sim: RankSim, chunk_us: float, *, backward: bool, with_loss: bool) -> None:
    """The kernels of one model chunk for one microbatch (two layers' worth)."""
    for _ in range(2):
        if backward:
            wl.backward_layer(sim, chunk_us / 2)
        else:
            wl.forward_layer(sim, chunk_us / 2)
    if with_loss:
        wl.loss(sim, 20.0)


def memory_pressure(
    *,
    steps: int = 3,
    layers: int = 8,
    layer_ms: float = 1.0,
    flush: bool = True,
    mallocs: int = 12,
    offload_mb: float = 64.0,
    pageable_mb: float = 64.0,
) -> Plan:
    """Memory pressure: allocator flush and retries, activation offload, pageable copies."""
    _check(
        mallocs >= 0 and offload_mb >= 0 and pageable_mb >= 0,
        "mallocs, offload_mb and pageable_mb must be >= 0",
    )
    layer_us = layer_ms * 1e3

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                if s == 0:
                    sim.memory(int(70e9), int(76e9))  # weights, grads, optimizer state: a nearly full GPU
                if flush:
                    # A cudaMalloc fails (out of memory); the allocator frees its cached blocks
                    # (cudaFree synchronizes the device) and retries.
                    with sim.op("aten::empty_strided"):
                        sim.cuda_malloc(sim.jit(30.0))
                        for _ in range(4):
                            sim.cuda_free(sim.jit(600.0))
                        sim.memory(0, -int(6e9))
                        sim.cuda_malloc(sim.jit(500.0))
                for _ in range(mallocs):
                    with sim.op("aten::empty_strided"):
                        sim.cuda_malloc(sim.jit(350.0))
                        sim.memory(0, int(6e9) // max(mallocs, 1))
                sim.dataloader_next(40.0)
                if pageable_mb > 0:
                    with sim.op("aten::copy_"):
                        sim.memcpy("HtoD", int(pageable_mb * 1e6), pinned=False, bw_gbps=6.0)
                fetched: list[float] = []
                for _ in range(layers):
                    wl.forward_layer(sim, layer_us)
                    sim.memory(int(400e6))
                    if offload_mb > 0:
                        with sim.op("aten::copy_"):  # save_on_cpu / activation offload
                            sim.memcpy(
                                "DtoH",
                                int(offload_mb * 1e6),
                                pinned=True,
                                bw_gbps=12.0,
                                stream=COPY_STREAM,
                                deps=[(sim.stream_free[COMPUTE_STREAM], Cause.MEMORY)],
                            )
                wl.loss(sim)
                for _ in range(layers):
                    if offload_mb > 0:
                        with sim.op("aten::copy_"):
                            _, end = sim.memcpy(
                                "HtoD", int(offload_mb * 1e6), pinned=True, bw_gbps=12.0, stream=COPY_STREAM
                            )
                        sim.deps.append((end, Cause.MEMORY))
                        fetched.append(end)
                    wl.backward_layer(sim, layer_us)
                    sim.memory(-int(400e6))
                wl.optimizer_step(sim, layer_us * 0.3 * layers / 4)
                wl.zero_grad(sim)
                sim.item()
        return
        yield  # a generator with no rendezvous

    return Plan(1, program, {"intended": "memory"})


def input_bound(*, steps: int = 4, layers: int = 8, layer_ms: float = 1.0, batch_ms: float = 40.0) -> Plan:
    """The DataLoader cannot keep up: the device waits for each batch."""
    _check(batch_ms >= 0, "batch_ms must be >= 0")

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                yield from _dp_step(
                    sim,
                    s,
                    ranks=1,
                    layers=layers,
                    layer_us=layer_ms * 1e3,
                    grad_mb=0.0,
                    buckets=1,
                    link_gbs=1.0,
                    batch_wait_us=batch_ms * 1e3,
                )

    return Plan(1, program, {"intended": "dataloader"})


def sync_heavy(*, steps: int = 3, layers: int = 8, layer_ms: float = 0.5, items_per_layer: int = 4) -> Plan:
    """`.item()` inside the loop: the host waits for the device, then the device waits."""
    _check(items_per_layer >= 0, "items_per_layer must be >= 0")
    layer_us = layer_ms * 1e3

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                wl.input_batch(sim, 8 << 20)
                for _ in range(layers):
                    wl.forward_layer(sim, layer_us)
                    for _ in range(items_per_layer):
                        sim.aten("aten::max", wl.TINY, 4.0)
                        sim.item()
                        sim.idle(sim.jit(120.0))  # Python acting on the value (logging, a branch)
                wl.loss(sim)
                for _ in range(layers):
                    wl.backward_layer(sim, layer_us)
                wl.optimizer_step(sim, layer_us * 0.3 * layers / 4)
                wl.zero_grad(sim)
                sim.item()
        return
        yield

    return Plan(1, program, {"intended": "sync"})


def launch_bound(*, steps: int = 3, layers: int = 24, layer_us: float = 60.0, op_us: float = 14.0) -> Plan:
    """A small model on a big GPU: kernels of a few microseconds, the host cannot keep up."""
    _check(layer_us > 0 and op_us >= 0, "layer_us must be > 0 and op_us >= 0")

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                wl.input_batch(sim, 1 << 20)
                for _ in range(layers):
                    wl.forward_layer(sim, layer_us)
                wl.loss(sim, 5.0)
                for _ in range(layers):
                    wl.backward_layer(sim, layer_us)
                wl.optimizer_step(sim, 40.0, groups=8)
                wl.zero_grad(sim)
                sim.item()
        return
        yield

    return Plan(1, program, {"intended": "host"}, timing=Timing(op_us=op_us))


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
    import random

    _check(ranks >= 2, "rl_post_training needs at least 2 ranks")
    _check(0 < tokens_min <= tokens_max, "need 0 < tokens_min <= tokens_max")
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
                    _, end = yield from sim.collective(
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
                    yield from _dp_step(
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


SCENARIOS: dict[str, Callable[..., Plan]] = {
    "healthy": healthy,
    "pipeline": pipeline,
    "dp_exposed": dp_exposed,
    "dp_overlapped": dp_overlapped,
    "straggler": straggler,
    "imbalance": imbalance,
    "memory_pressure": memory_pressure,
    "input_bound": input_bound,
    "sync_heavy": sync_heavy,
    "launch_bound": launch_bound,
    "rl_post_training": rl_post_training,
}
