"""The simulated model: a stack of transformer layers, as the kernels a real one launches.

Each helper issues the framework operators and kernels of one piece of a training step on
a :class:`RankSim` (names as PyTorch 2.x with cuBLAS and flash attention print them on an
H100). Durations are in microseconds: ``layer_us`` is the forward time of one layer and
the backward takes twice as long, as for a matmul-dominated layer.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprof.model.report import Cause
from gpuprof.simulate import comm
from gpuprof.simulate.engine import Program, Wait
from gpuprof.simulate.kernels import (  # noqa: F401 (the workload's kernels, named here for the scenarios)
    ADAM,
    ADD,
    ALLGATHER_KERNEL,
    ALLREDUCE_KERNEL,
    CROSS_ENTROPY,
    FLASH_BWD,
    FLASH_FWD,
    GELU,
    GEMM,
    GEMM_NT,
    LAYER_NORM,
    LAYER_NORM_BWD,
    REDUCE_SCATTER_KERNEL,
    TINY,
)
from gpuprof.simulate.rank import RankSim

# (operator, kernel, share of the layer's forward time)
FORWARD_OPS: tuple[tuple[str, str, float], ...] = (
    ("aten::layer_norm", LAYER_NORM, 0.04),
    ("aten::linear", GEMM, 0.20),
    ("aten::_scaled_dot_product_flash_attention", FLASH_FWD, 0.22),
    ("aten::linear", GEMM, 0.10),
    ("aten::add", ADD, 0.02),
    ("aten::layer_norm", LAYER_NORM, 0.04),
    ("aten::linear", GEMM, 0.18),
    ("aten::gelu", GELU, 0.03),
    ("aten::linear", GEMM, 0.15),
    ("aten::add", ADD, 0.02),
)
BACKWARD_OPS: tuple[tuple[str, str, float], ...] = (
    ("autograd::engine::evaluate_function: AddmmBackward0", GEMM_NT, 0.30),
    ("autograd::engine::evaluate_function: GeluBackward0", GELU, 0.06),
    ("autograd::engine::evaluate_function: AddmmBackward0", GEMM_NT, 0.36),
    ("autograd::engine::evaluate_function: NativeLayerNormBackward0", LAYER_NORM_BWD, 0.08),
    ("autograd::engine::evaluate_function: AddmmBackward0", GEMM_NT, 0.20),
    ("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", FLASH_BWD, 0.56),
    ("autograd::engine::evaluate_function: AddmmBackward0", GEMM_NT, 0.40),
    ("autograd::engine::evaluate_function: NativeLayerNormBackward0", LAYER_NORM_BWD, 0.08),
)  # shares sum to 2.04: backward is about twice the forward


def layer_ops(backward: bool) -> list[tuple[str, str, float]]:
    """(operator, kernel, device time as a share of the layer's forward time) of one layer."""
    if backward:
        return [(op, kernel, share / 1.02) for op, kernel, share in BACKWARD_OPS]
    return list(FORWARD_OPS)


def forward_layer(sim: RankSim, layer_us: float) -> tuple[float, float]:
    """The layer's operators; returns the device span of its kernels."""
    spans = [sim.aten(op, kernel, layer_us * share) for op, kernel, share in FORWARD_OPS]
    return spans[0][0], spans[-1][1]


def backward_layer(sim: RankSim, layer_us: float, op_us: float | None = None) -> tuple[float, float]:
    """The layer's backward operators (``op_us`` of host time each: default the rank's
    timing, as for the forward); returns the device span of its kernels."""
    ops = layer_ops(backward=True)
    spans = [sim.aten(op, kernel, layer_us * share, op_us=op_us) for op, kernel, share in ops]
    return spans[0][0], spans[-1][1]


def loss(sim: RankSim, us: float = 40.0) -> tuple[float, float]:
    return sim.aten("aten::cross_entropy_loss", CROSS_ENTROPY, us)


def optimizer_step(sim: RankSim, us: float, groups: int = 4) -> tuple[float, float]:
    """``optimizer.step()`` of fused Adam: a few multi-tensor kernels; returns their device span."""
    with sim.op("Optimizer.step#AdamW.step", cat="user_annotation"):
        spans = [sim.aten("aten::_fused_adamw_", ADAM, us / groups) for _ in range(groups)]
    return spans[0][0], spans[-1][1]


def zero_grad(sim: RankSim) -> None:
    with sim.op("Optimizer.zero_grad#AdamW.zero_grad", cat="user_annotation"):
        sim.idle(sim.jit(30.0))


def input_batch(sim: RankSim, nbytes: int, *, wait_us: float = 40.0, pinned: bool = True) -> None:
    """Fetch the next batch from the DataLoader and copy it to the device."""
    sim.dataloader_next(wait_us)
    with sim.op("aten::to"), sim.op("aten::_to_copy"), sim.op("aten::copy_"):
        sim.memcpy("HtoD", nbytes, pinned=pinned, bw_gbps=24.0 if pinned else 8.0)


def ring_us(nbytes: float, ranks: int, link_gbs: float) -> float:
    """Ring all-reduce transfer time: each rank moves 2 (n-1)/n of the buffer."""
    return 20.0 + 2.0 * (ranks - 1) / ranks * nbytes / (link_gbs * 1e3)


def allreduce(
    sim: RankSim,
    key: Any,
    nbytes: float,
    ranks: int | Sequence[int],
    link_gbs: float,
    *,
    pg: str = "0",
    pg_desc: str = "default_pg",
    timer: tuple[str, str, Mapping[str, int]] | None = None,
) -> Generator[Wait, None, tuple[float, float]]:
    """A bf16 ring all-reduce of ``nbytes`` over ``ranks`` (a count: ranks 0..n-1, or a list)."""
    members = list(range(ranks)) if isinstance(ranks, int) else list(ranks)
    return comm.collective(
        sim,
        key,
        coll="allreduce",
        op_name="c10d::allreduce_",
        annotation="nccl:all_reduce",
        kernel_name=ALLREDUCE_KERNEL,
        nelems=int(nbytes // 2),
        dtype="BFloat16",
        ranks=members,
        transfer_us=ring_us(nbytes, len(members), link_gbs),
        pg=pg,
        pg_desc=pg_desc,
        timer=timer,
    )


def sharded(
    sim: RankSim,
    kind: str,
    key: Any,
    nbytes: float,
    ranks: Sequence[int],
    link_gbs: float,
    *,
    pg: str,
    pg_desc: str,
    timer: tuple[str, str, Mapping[str, int]] | None = None,
) -> Generator[Wait, None, tuple[float, float]]:
    """A bf16 ring reduce-scatter (``kind="reduce_scatter"``) or all-gather of a buffer of
    ``nbytes`` over ``ranks``, as a distributed optimizer issues them: each rank moves
    (n-1)/n of the buffer (half of what an all-reduce moves)."""
    n = len(ranks)
    rs = kind == "reduce_scatter"
    return comm.collective(
        sim,
        key,
        coll="_reduce_scatter_base" if rs else "_allgather_base",
        op_name="c10d::_reduce_scatter_base_" if rs else "c10d::_allgather_base_",
        annotation="nccl:_reduce_scatter_base" if rs else "nccl:_all_gather_base",
        kernel_name=REDUCE_SCATTER_KERNEL if rs else ALLGATHER_KERNEL,
        nelems=int(nbytes // 2),
        dtype="BFloat16",
        ranks=list(ranks),
        transfer_us=20.0 + (n - 1) / n * nbytes / (link_gbs * 1e3),
        pg=pg,
        pg_desc=pg_desc,
        timer=timer,
    )


def waited(sim: RankSim, call: Generator[Wait, None, tuple[float, float]]) -> Generator[Wait, None, None]:
    """Run a collective (``yield from`` it), then make the compute stream wait for it
    (``work.wait()``)."""
    _, end = yield from call
    sim.deps.append((end, Cause.COMMUNICATION))


def train_step(
    sim: RankSim,
    layers: int,
    forward: Callable[[RankSim], object],
    backward: Callable[[RankSim], object],
    *,
    optimizer_us: float,
    loss_us: float = 40.0,
    groups: int = 4,
) -> None:
    """One training step of a single-rank model once its batch is in: ``forward`` per
    layer, the loss, ``backward`` per layer, the optimizer step (``groups`` kernels over
    ``optimizer_us``), ``zero_grad`` and ``loss.item()``."""
    for _ in range(layers):
        forward(sim)
    loss(sim, loss_us)
    for _ in range(layers):
        backward(sim)
    optimizer_step(sim, optimizer_us, groups)
    zero_grad(sim)
    sim.item()


@dataclass(frozen=True)
class DataParallel:
    """A data-parallel (DDP) training step: ``layers`` layers of ``layer_us`` forward time,
    ``grad_mb`` of gradients all-reduced over ``ranks`` in ``buckets`` buckets during the
    backward pass over links of ``link_gbs``, after a DataLoader wait of ``batch_wait_us``.
    ``backward_op_us``: host time of each backward operator (autograd's engine runs in C++,
    cheaper than the forward's Python), default the rank's timing like the forward's."""

    ranks: int
    layers: int
    layer_us: float
    grad_mb: float
    buckets: int
    link_gbs: float
    batch_wait_us: float = 40.0
    backward_op_us: float | None = None

    def step(self, sim: RankSim, step: int, scale: float = 1.0) -> Program:
        """One step on ``sim`` (``step`` from 0), its compute ``scale`` times as long:
        input, forward, backward with the bucketed all-reduce, optimizer."""
        layers = self.layers
        layer_us = self.layer_us * scale
        input_batch(sim, 8 << 20, wait_us=self.batch_wait_us)
        with sim.op("DistributedDataParallel.forward", cat="user_annotation"):
            for _ in range(layers):
                forward_layer(sim, layer_us)
            loss(sim)
        ends: list[float] = []
        per_bucket = max(1, layers // max(self.buckets, 1))
        pending = 0
        with sim.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"):
            for i in range(layers):
                backward_layer(sim, layer_us, self.backward_op_us)
                pending += 1
                if self.ranks > 1 and (pending == per_bucket or i == layers - 1):
                    nbytes = self.grad_mb * 1e6 * pending / layers
                    _, end = yield from allreduce(sim, (step, i), nbytes, self.ranks, self.link_gbs)
                    ends.append(end)
                    pending = 0
        for end in ends:  # DDP waits for every bucket before the optimizer
            sim.deps.append((end, Cause.COMMUNICATION))
        optimizer_step(sim, layer_us * 0.3 * layers / 4)
        zero_grad(sim)
        sim.item()  # loss.item() for logging
