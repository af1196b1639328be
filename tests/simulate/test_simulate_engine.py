"""The discrete-event engine on hand-written two-rank programs with answers worked out by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpuprof.model.report import Cause
from gpuprof.simulate import comm
from gpuprof.simulate.engine import COMPUTE_STREAM, Job, Program, SimulationError, Timing, run_job
from gpuprof.simulate.kineto import KinetoWriter
from gpuprof.simulate.rank import RankSim
from gpuprof.simulate.truth import rank_truth

EXACT = Timing(launch_us=5.0, queue_us=3.0, op_us=10.0, jitter=0.0)


def _sims(tmp_path: Path, n: int) -> list[RankSim]:
    job = Job(world_size=n)
    return [
        RankSim(
            job,
            r,
            KinetoWriter(
                tmp_path / f"rank{r}.pt.trace.json.gz",
                pid=100 + r,
                device=r,
                device_properties=[],
                distributed_info=None,
            ),
            seed=0,
            timing=EXACT,
        )
        for r in range(n)
    ]


def _close(sims: list[RankSim]) -> list[dict[str, Any]]:
    docs = []
    for s in sims:
        assert s.window is not None
        s.w.close(start_us=s.window[0], end_us=s.window[1], trace_name="t")
        with gzip.open(s.w.path, "rt") as fh:
            docs.append(json.load(fh))
    return docs


def test_collective_starts_when_the_last_rank_arrives(tmp_path: Path) -> None:
    sims = _sims(tmp_path, 2)

    def program(sim: RankSim) -> Program:
        with sim.step(1):
            sim.kernel("gemm", 1000.0 if sim.rank == 0 else 3000.0)
            yield from comm.collective(
                sim,
                "g", coll="allreduce", op_name="c10d::allreduce_", annotation="nccl:all_reduce",
                kernel_name="ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                nelems=10, dtype="Float", ranks=[0, 1], transfer_us=500.0,
            )  # fmt: skip
            sim.device_sync()

    run_job(sims, [program, program])
    docs = _close(sims)
    nccl = [next(e for e in d["traceEvents"] if e.get("name", "").startswith("ncclDevKernel")) for d in docs]
    gemm = [next(e for e in d["traceEvents"] if e.get("name") == "gemm") for d in docs]
    # both kernels end together, 500 us after the late rank's gemm ended
    assert nccl[0]["ts"] + nccl[0]["dur"] == pytest.approx(nccl[1]["ts"] + nccl[1]["dur"], abs=0.002)
    late_ready = gemm[1]["ts"] + gemm[1]["dur"]
    assert nccl[1]["ts"] + nccl[1]["dur"] == pytest.approx(late_ready + 500.0, abs=0.01)
    # rank 0 sits in the NCCL kernel for the 2000 us rank 1 needs more, plus the transfer
    assert nccl[0]["dur"] == pytest.approx(2000.0 + 500.0, abs=20.0)
    t0, t1 = rank_truth(sims[0]), rank_truth(sims[1])
    assert t0.lost_us[Cause.STRAGGLER] == pytest.approx(2000.0, abs=20.0)
    assert t1.lost_us[Cause.STRAGGLER] == pytest.approx(0.0, abs=1.0)
    assert t0.lost_us[Cause.COMMUNICATION] == pytest.approx(500.0, abs=1.0)
    assert t1.lost_us[Cause.COMMUNICATION] == pytest.approx(500.0, abs=1.0)


def test_kernel_waits_for_launch_stream_and_dependencies(tmp_path: Path) -> None:
    (sim,) = _sims(tmp_path, 1)

    def program(s: RankSim) -> Program:
        with s.step(1):
            t_launch = s.t
            a = s.kernel("a", 100.0)
            assert a[0] == pytest.approx(t_launch + 5.0 + 3.0)  # launch call, then queue latency
            s.idle(400.0)  # Python between two launches: the device goes idle
            t_launch = s.t
            b = s.kernel("b", 100.0)
            assert b[0] == pytest.approx(t_launch + 5.0 + 3.0) and b[0] > a[1] + 290.0
            s.dataloader_next(300.0)
            c = s.kernel("c", 100.0)
            assert c[0] > b[1] + 200.0  # the 300 us wait overlaps b, which runs meanwhile
            s.device_sync()
        return
        yield

    run_job([sim], [program])
    t = rank_truth(sim)
    assert t.compute_us == pytest.approx(300.0)
    assert t.lost_us[Cause.DATALOADER] > 200.0
    assert t.lost_us[Cause.HOST] > 290.0
    assert t.compute_us + sum(t.lost_us.values()) == pytest.approx(t.window_us)


def test_stream_order_and_host_blocking_sync(tmp_path: Path) -> None:
    (sim,) = _sims(tmp_path, 1)

    def program(s: RankSim) -> Program:
        with s.step(1):
            first = s.kernel("long", 5000.0)
            second = s.kernel("short", 10.0)  # queued behind the long one on the same stream
            assert second[0] == pytest.approx(first[1])
            host_before = s.t
            s.stream_sync(COMPUTE_STREAM)
            assert s.t >= first[1] + 10.0 > host_before
            s.kernel("after", 10.0)
        return
        yield

    run_job([sim], [program])
    assert rank_truth(sim).lost_us[Cause.SYNC] > 5.0


def test_p2p_receive_waits_for_the_sender(tmp_path: Path) -> None:
    sims = _sims(tmp_path, 2)

    def program(sim: RankSim) -> Program:
        with sim.step(1):
            if sim.rank == 0:
                sim.kernel("fwd", 2000.0)
                yield from comm.p2p(sim, "send", 1, "act", nelems=1, transfer_us=50.0, ranks=[0, 1])
            else:
                _, end = yield from comm.p2p(sim, "recv", 0, "act", nelems=1, transfer_us=50.0, ranks=[0, 1])
                start, _ = sim.kernel("fwd", 2000.0)
                assert start >= end
            sim.device_sync()

    run_job(sims, [program, program])
    bubble = rank_truth(sims[1]).lost_us[Cause.PIPELINE_BUBBLE]
    assert bubble == pytest.approx(2000.0 + 50.0, abs=40.0)


def test_a_receive_nobody_sends_is_reported_as_a_deadlock(tmp_path: Path) -> None:
    sims = _sims(tmp_path, 2)

    def program(sim: RankSim) -> Program:
        with sim.step(1):
            yield from comm.p2p(sim, "recv", 1 - sim.rank, "x", nelems=1, transfer_us=1.0, ranks=[0, 1])

    with pytest.raises(SimulationError, match="deadlocks"):
        run_job(sims, [program, program])
    for s in sims:
        s.w.abort()
    assert not list(tmp_path.iterdir()), "aborted writers leave no partial files"
