"""Scenarios of one rank: healthy, memory pressure, allocator churn, input-bound, sync-heavy,
launch-bound.

Each function takes the scenario's knobs (units in their names, meanings in
:data:`gpuprof.simulate.scenarios.KNOB_HELP`) and returns a :class:`Plan` whose program
runs :func:`~gpuprof.simulate.scenario.each_step` of the scenario's work.
"""

from __future__ import annotations

from functools import partial

from gpuprof.model.report import Cause
from gpuprof.simulate import workload as wl
from gpuprof.simulate.engine import COMPUTE_STREAM, COPY_STREAM, Program, Timing
from gpuprof.simulate.fixes import FREE_HOST, FREE_LAUNCHES, NO_ALLOCATOR, NO_DATALOADER, NO_SYNC
from gpuprof.simulate.plan import Plan, check
from gpuprof.simulate.rank import RankSim
from gpuprof.simulate.scenario import each_step
from gpuprof.simulate.workload import DataParallel


def healthy(
    *, ranks: int = 1, steps: int = 3, layers: int = 8, layer_ms: float = 1.5,
    link_gbs: float = 200.0, grad_mb: float = 100.0, buckets: int = 4,
) -> Plan:  # fmt: skip
    """A well-fed, compute-bound run: nothing worth fixing."""
    check(ranks >= 1 and steps >= 1 and layers >= 1, "ranks, steps and layers must be at least 1")
    ddp = DataParallel(ranks, layers, layer_ms * 1e3, grad_mb, buckets, link_gbs)
    # nothing intended: "all" is its what-if
    return Plan(ranks, each_step(steps, ddp.step), {"intended": None})


def memory_pressure(
    *, steps: int = 3, layers: int = 8, layer_ms: float = 1.0,
    flush: bool = True, mallocs: int = 12, offload_mb: float = 64.0, pageable_mb: float = 64.0,
) -> Plan:  # fmt: skip
    """Memory pressure: allocator flush and retries, activation offload, pageable copies."""
    check(
        mallocs >= 0 and offload_mb >= 0 and pageable_mb >= 0,
        "mallocs, offload_mb and pageable_mb must be >= 0",
    )
    layer_us = layer_ms * 1e3

    def forward(sim: RankSim) -> None:
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

    def backward(sim: RankSim) -> None:
        if offload_mb > 0:
            with sim.op("aten::copy_"):
                _, end = sim.memcpy(
                    "HtoD", int(offload_mb * 1e6), pinned=True, bw_gbps=12.0, stream=COPY_STREAM
                )
            sim.deps.append((end, Cause.MEMORY))
        wl.backward_layer(sim, layer_us)
        sim.memory(-int(400e6))

    def work(sim: RankSim, s: int) -> None:
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
        wl.train_step(sim, layers, forward, backward, optimizer_us=layer_us * 0.3 * layers / 4)

    intended = (NO_ALLOCATOR,) if flush or mallocs else ()
    return Plan(1, each_step(steps, work), {"intended": "memory"}, intended_whatifs=intended)


def input_bound(
    *, steps: int = 4, layers: int = 8, layer_ms: float = 1.0, batch_ms: float = 40.0, op_us: float = 9.0,
    host_cores: int = 0, loader_workers: int = 4,
) -> Plan:  # fmt: skip
    """The DataLoader cannot keep up: the device waits for each batch.

    ``host_cores > 0``: the fix (``no_dataloader``: ``loader_workers`` worker processes that
    keep up) makes the workers compete with the training process for that many cores, so
    its own host work slows down (:func:`loader_contention`); the job as written keeps its
    host at full speed (its loader fits in the spare cores)."""
    check(batch_ms >= 0 and op_us >= 0, "batch_ms and op_us must be >= 0")
    check(host_cores >= 0 and loader_workers >= 1, "need host_cores >= 0 and loader_workers >= 1")
    ddp = DataParallel(1, layers, layer_ms * 1e3, 0.0, 1, 1.0, batch_wait_us=batch_ms * 1e3)
    timing = Timing(op_us=op_us)

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            if host_cores and NO_DATALOADER in sim.fixes:
                last_us = sim.steps[-1][2] - sim.steps[-1][1] if sim.steps else None
                sim.host_factor = loader_contention(batch_ms * 1e3, last_us, loader_workers, host_cores)
            with sim.step(s + 1):
                yield from ddp.step(sim, s)

    return Plan(1, program, {"intended": "dataloader"}, timing=timing, intended_whatifs=(NO_DATALOADER,))


def loader_contention(batch_us: float, step_us: float | None, workers: int, cores: int) -> float:
    """Time factor of the training process's own host work while ``workers`` DataLoader
    workers keep up with it on ``cores`` CPU cores.

    A worker takes a whole core while it produces a batch (decoding, augmenting: CPU-bound
    Python) and sleeps once its prefetch queue is full. Keeping up means producing one
    batch, ``batch_us`` of CPU time, per step, so the workers together keep
    ``min(workers, batch_us / step_us)`` cores busy, where ``step_us`` is the previous
    profiled step (for the first one, ``batch_us``: one core's worth). With the training
    process's main thread, ``1 + that`` threads want a core; the scheduler shares the cores
    evenly, so when they are more than ``cores`` the main thread runs at ``cores / demand``
    of its speed: its host work takes ``demand / cores`` times as long.
    """
    busy = min(float(workers), batch_us / (step_us or batch_us))
    return max(1.0, (1.0 + busy) / cores)


def sync_heavy(
    *, steps: int = 3, layers: int = 8, layer_ms: float = 0.5,
    items_per_layer: int = 4, python_ms: float = 0.12,
) -> Plan:  # fmt: skip
    """`.item()` inside the loop: the host waits for the device, then the device waits."""
    check(items_per_layer >= 0 and python_ms >= 0, "items_per_layer and python_ms must be >= 0")
    layer_us = layer_ms * 1e3

    def forward(sim: RankSim) -> None:
        wl.forward_layer(sim, layer_us)
        for _ in range(items_per_layer):
            sim.aten("aten::max", wl.TINY, 4.0)
            sim.item()
            sim.idle(sim.jit(python_ms * 1e3))  # Python acting on the value (logging, a branch)

    def backward(sim: RankSim) -> None:
        wl.backward_layer(sim, layer_us)

    def work(sim: RankSim, s: int) -> None:
        wl.input_batch(sim, 8 << 20)
        wl.train_step(sim, layers, forward, backward, optimizer_us=layer_us * 0.3 * layers / 4)

    # With milliseconds of Python after each sync (the issue-10 case "sync, then host work")
    # making that Python free saves even more than removing the syncs: both are intended.
    intended = (NO_SYNC, FREE_HOST) if python_ms >= 1.0 else (NO_SYNC,)
    return Plan(1, each_step(steps, work), {"intended": "sync"}, intended_whatifs=intended)


def launch_bound(*, steps: int = 3, layers: int = 24, layer_us: float = 60.0, op_us: float = 14.0) -> Plan:
    """A small model on a big GPU: kernels of a few microseconds, the host cannot keep up."""
    check(layer_us > 0 and op_us >= 0, "layer_us must be > 0 and op_us >= 0")

    forward = partial(wl.forward_layer, layer_us=layer_us)
    backward = partial(wl.backward_layer, layer_us=layer_us)

    def work(sim: RankSim, s: int) -> None:
        wl.input_batch(sim, 1 << 20)
        wl.train_step(sim, layers, forward, backward, loss_us=5.0, optimizer_us=40.0, groups=8)

    return Plan(
        1,
        each_step(steps, work),
        {"intended": "host"},
        timing=Timing(op_us=op_us),
        intended_whatifs=(FREE_LAUNCHES,),
    )


# the aten operator that runs the kernel inside each autograd node of the layer's backward
_BACKWARD_ATEN = {
    "AddmmBackward0": "aten::mm",
    "GeluBackward0": "aten::gelu_backward",
    "NativeLayerNormBackward0": "aten::native_layer_norm_backward",
    "ScaledDotProductFlashAttentionBackward0": "aten::_scaled_dot_product_flash_attention_backward",
}


def alloc_churn(
    *, steps: int = 3, layers: int = 6, layer_us: float = 400.0, op_us: float = 40.0,
    frees_per_layer: int = 4, free_us: float = 60.0, malloc_us: float = 12.0,
) -> Plan:  # fmt: skip
    """The caching allocator thrashes (e.g. PYTORCH_NO_HIP_MEMORY_CACHING=1 on ROCm): operators
    call hipMalloc/hipFree inside, every free synchronizes the device, and the host overhead
    of the operators lands in the same gaps."""
    check(layer_us > 0 and op_us >= 0, "layer_us must be > 0 and op_us >= 0")
    check(
        frees_per_layer >= 0 and free_us >= 0 and malloc_us >= 0,
        "frees_per_layer, free_us, malloc_us must be >= 0",
    )

    def churned_op(sim: RankSim, op: str, kernel: str, us: float, free: bool) -> None:
        with sim.op(op):
            sim.idle(sim.jit(op_us))
            sim.cuda_malloc(malloc_us)  # the output, straight from the device allocator
            sim.kernel(kernel, us)
            if free:
                sim.cuda_free(free_us)  # a temporary released inside the operator

    def churned_layer(sim: RankSim, backward: bool) -> None:
        for i, (op, kernel, share) in enumerate(wl.layer_ops(backward)):
            if not backward:
                churned_op(sim, op, kernel, layer_us * share, i < frees_per_layer)
                continue
            node = op.split(": ", 1)[-1]
            with sim.op(op), sim.op(node):
                churned_op(sim, _BACKWARD_ATEN[node], kernel, layer_us * share, i < frees_per_layer)

    forward, backward = partial(churned_layer, backward=False), partial(churned_layer, backward=True)

    def work(sim: RankSim, s: int) -> None:
        wl.input_batch(sim, 1 << 20)
        wl.train_step(sim, layers, forward, backward, loss_us=20.0, optimizer_us=60.0)

    return Plan(
        1,
        each_step(steps, work),
        {"intended": "memory"},
        timing=Timing(op_us=op_us),
        intended_whatifs=(NO_ALLOCATOR, FREE_LAUNCHES),
        platform="rocm",
    )
