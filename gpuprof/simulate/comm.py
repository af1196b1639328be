"""Communication on the simulated ranks: NCCL collectives and point-to-point transfers.

Both are generator functions for a rank's program to ``yield from``: they issue the host
operators PyTorch records (``c10d::allreduce_`` > ``record_param_comms`` >
``nccl:all_reduce`` > ``cudaLaunchKernelExC``), place the NCCL kernel on its stream, and
record the ground truth of the time spent in it. Their transfer time is the one of the
rank's what-if fixes (:meth:`RankSim.transfer_us`). Given a ``timer`` (lane, name, args),
they also record the Megatron-style timer op of the transfer.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from gpuprof.model.report import Cause
from gpuprof.simulate.engine import NCCL_STREAM, P2P_STREAM, Wait
from gpuprof.simulate.rank import RankSim

# The NCCL kernels' launch attributes, as Kineto records them (before the call's own args).
_COLLECTIVE_KERNEL: dict[str, Any] = {
    "registers per thread": 96,
    "shared memory": 87568,
    "blocks per SM": 0.1,
    "warps per SM": 1.2,
    "grid": [16, 1, 1],
    "block": [544, 1, 1],
    "est. achieved occupancy %": 0,
}
_SENDRECV_KERNEL: dict[str, Any] = {
    **_COLLECTIVE_KERNEL,
    "shared memory": 35856,
    "blocks per SM": 0.01,
    "warps per SM": 0.2,
    "grid": [1, 1, 1],
    "block": [640, 1, 1],
}
SENDRECV_KERNEL_NAME = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def collective(
    sim: RankSim,
    key: Any,
    *,
    coll: str,
    op_name: str,
    annotation: str,
    kernel_name: str,
    nelems: int,
    dtype: str,
    ranks: Sequence[int],
    transfer_us: float,
    pg: str = "0",
    pg_desc: str = "default_pg",
    timer: tuple[str, str, Mapping[str, int]] | None = None,
) -> Generator[Wait, None, tuple[float, float]]:
    """An NCCL collective on the NCCL stream; returns the kernel's ``(start, end)``.

    The NCCL stream first waits for the compute stream (what ProcessGroupNCCL does), so
    a rank arrives when its own compute before the call is done, and any transfer the
    compute stream was made to wait for (``work.wait()``). Its timer op spans the
    transfer only, as Megatron-style exporters record it (the start moved to the end minus
    the transfer time): the wait for late ranks is an untimed gap before the op.
    """
    transfer_us = sim.transfer_us(transfer_us, collective=True)
    call_args = _call_args(coll, nelems, dtype, ranks, pg, pg_desc)
    full = ("coll", pg) + tuple(key) if isinstance(key, tuple) else ("coll", pg, key)
    with _ops(sim, op_name, call_args, annotation):
        launch = _launch(sim, NCCL_STREAM, host_us=6.0, launch_us=8.0)
        arrival = launch.arrival
        sim.job.post(full, sim.rank, arrival, len(ranks), transfer_us)
        yield Wait(full)
        xfer_start, end = sim.job.resolved[full]
        sim.stream_free[NCCL_STREAM] = end
        _write_kernel(sim, launch, end, kernel_name, annotation, {**_COLLECTIVE_KERNEL, **call_args})
        sim.claim(sim.wait_cause, arrival, xfer_start)
        sim.claim(Cause.COMMUNICATION, xfer_start, end)
    if timer is not None:
        lane, name, args = timer
        sim.timer(lane, name, xfer_start, end, **args)
    return arrival, end


def p2p(
    sim: RankSim,
    kind: str,
    peer: int,
    key: Any,
    *,
    nelems: int,
    transfer_us: float,
    ranks: Sequence[int],
    pg: str = "0",
    timer: tuple[str, str, Mapping[str, int]] | None = None,
) -> Generator[Wait, None, tuple[float, float]]:
    """``dist.isend`` / ``dist.irecv`` followed by ``wait()`` (as pipeline schedules do).

    A send ends ``transfer_us`` after it starts (NCCL buffers it); a receive ends when
    the sender's data has arrived. The compute stream waits for either to finish. The
    timer op spans the transfer itself (a receive's wait for its sender is not in it).
    """
    transfer_us = sim.transfer_us(transfer_us, collective=False)
    src, dst = (sim.rank, peer) if kind == "send" else (peer, sim.rank)
    # ProcessGroupNCCL titles the call with group ranks: "nccl:send 1->2" in a group [1, 3, 5, 7]
    # is global rank 3 sending to 5.
    g_src, g_dst = (list(ranks).index(x) if x in ranks else x for x in (src, dst))
    annotation = f"nccl:send {g_src}->{g_dst}" if kind == "send" else f"nccl:recv {g_dst}<-{g_src}"
    data_key = _data_key(src, dst, key)
    call_args = _call_args(kind, nelems, "BFloat16", ranks, pg, "default_pg")
    with _ops(sim, "c10d::send" if kind == "send" else "c10d::recv_", call_args, annotation):
        launch = _launch(sim, P2P_STREAM, host_us=5.0, launch_us=7.0)
        arrival = launch.arrival
        if kind == "send":
            end = arrival + transfer_us
            sim.job.post_data(data_key, end)
        else:
            yield Wait(data_key)
            end = max(sim.job.resolved[data_key][1], arrival + transfer_us)
        sim.stream_free[P2P_STREAM] = end
        _write_kernel(sim, launch, end, SENDRECV_KERNEL_NAME, annotation, {**_SENDRECV_KERNEL, **call_args})
        sim.claim(Cause.PIPELINE_BUBBLE, arrival, end)
    if timer is not None:
        lane, name, args = timer
        sim.timer(lane, name, max(arrival, end - transfer_us), end, transfer=data_key, **args)
    # work.wait(): the compute stream waits for the transfer
    sim.deps.append((end, Cause.PIPELINE_BUBBLE))
    return arrival, end


def exchange(
    sim: RankSim,
    peer: int,
    send_key: Any,
    recv_key: Any,
    *,
    transfer_us: float,
    timers: tuple[tuple[str, str, Mapping[str, int]], tuple[str, str, Mapping[str, int]]] | None = None,
) -> Generator[Wait, None, tuple[float, float]]:
    """A batched send and receive with one peer that both sides wait for (Megatron's
    ``send_forward_recv_backward`` / ``send_backward_recv_forward``: ``batch_isend_irecv``
    then ``wait()``): NCCL moves the data once both stages have posted their calls, so the
    exchange starts when the later of the two is ready and ends a transfer later on both.
    Returns the call's ``(arrival, end)`` on this rank. The two timer ops (send, receive)
    span the transfer on both ranks; the wait for the peer is a gap before them."""
    transfer_us = sim.transfer_us(transfer_us, collective=False)
    data_send = _data_key(sim.rank, peer, send_key)
    data_recv = _data_key(peer, sim.rank, recv_key)
    key = ("xchg",) + tuple(sorted((data_send, data_recv), key=repr))
    with sim.op("c10d::batch_isend_irecv"):
        arrival = _launch(sim, P2P_STREAM, host_us=6.0, launch_us=7.0).arrival
        sim.job.post(key, sim.rank, arrival, 2, transfer_us)
        yield Wait(key)
        xfer_start, end = sim.job.resolved[key]
        sim.stream_free[P2P_STREAM] = end
        sim.claim(Cause.PIPELINE_BUBBLE, arrival, end)
    if timers is not None:
        for (lane, name, args), data in zip(timers, (data_send, data_recv)):
            sim.timer(lane, name, xfer_start, end, transfer=data, **args)
    sim.deps.append((end, Cause.PIPELINE_BUBBLE))
    return arrival, end


def _data_key(src: int, dst: int, key: Any) -> tuple[Any, ...]:
    """The rendezvous key of the data ``src`` sends ``dst`` under ``key``."""
    return ("p2p", src, dst) + (tuple(key) if isinstance(key, tuple) else (key,))


def _call_args(
    kind: str, nelems: int, dtype: str, ranks: Sequence[int], pg: str, pg_desc: str
) -> dict[str, Any]:
    """The call's args as ``record_param_comms`` and the NCCL kernel carry them: the
    collective's, then its process group's."""
    return {
        "Collective name": kind,
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "Group size": len(ranks),
        "dtype": dtype,
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": pg,
        "Process Group Description": pg_desc,
        "Process Group Ranks": str(list(ranks)),
    }


@contextmanager
def _ops(sim: RankSim, op_name: str, call_args: Mapping[str, Any], annotation: str) -> Iterator[None]:
    """The host ranges PyTorch records around an NCCL call: the c10d operator, then
    ``record_param_comms`` with the call's args, then the ``nccl:*`` annotation."""
    with (
        sim.op(op_name),
        sim.op("record_param_comms", args={**call_args, "Global rank start": 0, "Global rank stride": 1}),
        sim.op(annotation, cat="user_annotation"),
    ):
        yield


class _Launch(NamedTuple):
    stream: int  # the stream the kernel runs on
    corr: int  # the launch's correlation id
    t_launch: float  # when the launch call started on the host
    arrival: float  # when the kernel can start on its stream


def _launch(sim: RankSim, stream: int, *, host_us: float, launch_us: float) -> _Launch:
    """The host side of an NCCL call: ``host_us`` in the framework, then ProcessGroupNCCL
    makes the NCCL stream wait for the current stream (an event recorded and waited for)
    and launches the kernel, which can start on ``stream`` after the launch, the stream's
    last op and the compute stream (with what it was made to wait for)."""
    sim.idle(sim.jit(host_us))
    sim.runtime("cudaEventRecord", 135, sim.jit(2.0), launch=True)
    sim.runtime("cudaStreamWaitEvent", 147, sim.jit(1.5), launch=True)
    corr, t0, t1 = sim.runtime("cudaLaunchKernelExC", 430, sim.jit(launch_us), launch=True)
    arrival = max(
        t1 + sim.jit(sim.timing.queue_us),
        sim.stream_free[stream],
        sim.compute_stream_ready(),
    )
    return _Launch(stream, corr, t0, arrival)


def _write_kernel(
    sim: RankSim, launch: _Launch, end: float, name: str, annotation: str, args: Mapping[str, Any]
) -> None:
    """The NCCL kernel of ``launch`` on the device until ``end``, with ``args``, and the
    ``nccl:*`` annotation over it on the same stream."""
    if not sim.writing:
        return
    start, stream = launch.arrival, launch.stream
    sim.emit_device("kernel", name, stream, start, end, launch.corr, launch.t_launch, args)
    sim.w.device_x("gpu_user_annotation", annotation, sim.pf.stream(stream), start, end, {"External id": sim.ext})
