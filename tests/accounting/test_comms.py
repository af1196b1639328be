"""The per-rank table of collective and point-to-point calls (``RankSummary.comms``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rankbuilder import RankBuilder

from gpuprof.accounting.comms import build_comms, timeline_group
from gpuprof.accounting.summary import COMMS_COLUMNS
from gpuprof.model.timeline import Category, RankTrace

ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
ALLGATHER = "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
BROADCAST = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


def _comm(
    b: RankBuilder, start: float, end: float, launch: float, name: str, coll: str, pg: str, stream: int
) -> None:
    b.kernel(start, end, launch_at=launch, name=name, stream=stream)
    b.dev[-1].update(coll_name=coll, pg=pg, bytes=4096)


def _trace() -> RankTrace:
    b = RankBuilder()
    b.step(1, 0.0, 1000.0)
    b.step(2, 1000.0, 2000.0)
    b.kernel(0.0, 100.0, launch_at=-20.0)
    # Launched first, but its stream starts it after the all-gather launched next.
    _comm(b, 150.0, 300.0, 120.0, ALLREDUCE, "allreduce", "0", 20)
    _comm(b, 140.0, 200.0, 130.0, ALLGATHER, "allgather", "0", 21)
    _comm(b, 1200.0, 1300.0, 1100.0, BROADCAST, "broadcast", "1", 20)
    _comm(b, 1500.0, 1600.0, 1400.0, SENDRECV, "send", "2", 22)
    _comm(b, 2500.0, 2600.0, 2400.0, ALLREDUCE, "allreduce", "0", 20)  # after the window
    for row in b.dev:
        row.setdefault("coll_name", "")
        row.setdefault("pg", "")
    return b.build(rank=3)


def test_one_row_per_call_in_the_window_with_launch_step_and_order() -> None:
    t = build_comms(_trace(), 0.0, 2000.0)
    assert list(t.columns) == list(COMMS_COLUMNS)
    assert list(t["coll_name"]) == ["allgather", "allreduce", "broadcast", "send"]  # by device start
    assert list(t["launch_us"]) == [130.0, 120.0, 1100.0, 1400.0]
    # Order within a process group follows the host's issue order, not the device start.
    assert list(t["seq"]) == [1, 0, 0, 0]
    assert list(t["pg"]) == ["0", "0", "1", "2"]
    assert list(t["step"]) == [1, 1, 2, 2]
    assert list(t["category"]) == [int(Category.COLLECTIVE)] * 3 + [int(Category.P2P)]
    assert list(t["bytes"]) == [4096] * 4
    assert (t["peer"] == -1).all() and (t["mb_id"] == -1).all()


def test_window_bounds_and_empty_traces() -> None:
    assert len(build_comms(_trace(), 1000.0, 2000.0)) == 2
    # A call that overlaps the window edge is kept whole (matching needs its true span).
    edge = build_comms(_trace(), 160.0, 2000.0)
    assert edge["start_us"].min() == 140.0
    empty = build_comms(RankBuilder().build(), 0.0, 10.0)
    assert list(empty.columns) == list(COMMS_COLUMNS) and len(empty) == 0


def test_timeline_groups_follow_the_parallel_layout() -> None:
    a = {"pp_rank": 1, "tp_rank": 0, "dp_rank": 0}
    b = {"pp_rank": 1, "tp_rank": 0, "dp_rank": 1}
    c = {"pp_rank": 2, "tp_rank": 0, "dp_rank": 0}
    # Data-parallel collectives: same stage -> same group, other stage -> other group.
    assert timeline_group("grads-reduce-scatter", a) == timeline_group("grads-reduce-scatter", b)
    assert timeline_group("grads-reduce-scatter", a) != timeline_group("grads-reduce-scatter", c)
    # Embedding gradients: first and last stage of one replica -> same group.
    assert timeline_group("embedding-grads-all-reduce", a) == timeline_group("embedding-grads-all-reduce", c)
    assert timeline_group("embedding-grads-all-reduce", a) != timeline_group("embedding-grads-all-reduce", b)
    assert timeline_group("grads-reduce-scatter", {}) == ""


def test_dlrm_calls_are_all_to_all_and_all_reduce_launched_before_they_run(shared_traces: Path) -> None:
    from gpuprof.readers import load_all

    for trace in load_all([shared_traces / "dlrm-8rank"]):
        t = build_comms(trace, -np.inf, np.inf)
        assert len(t) == 8
        assert sorted(set(t["coll_name"])) == ["all_reduce", "all_to_all"]
        assert (t["category"] == int(Category.COLLECTIVE)).all()  # SendRecv under alltoall is collective
        assert (t["launch_us"] <= t["start_us"]).all()
        assert sorted(t["seq"]) == list(range(8))
        assert set(t["step"]) == {trace.steps[0].number}


def test_megatron_first_stage_sends_activations_and_receives_gradients(shared_traces: Path) -> None:
    from gpuprof.readers import load_all

    traces = {t.rank: t for t in load_all([shared_traces / "megatron-pp4-timeline"])}
    first = next(t for t in traces.values() if t.parallel.get("pp_rank") == 0)
    t = build_comms(first, -np.inf, np.inf)
    p2p = t.loc[t["category"] == int(Category.P2P), "name"]
    assert set(p2p) == {"forward-send", "backward-recv"}
    steps = len(first.steps)
    assert (p2p == "forward-send").sum() == (p2p == "backward-recv").sum() == 4 * steps
    coll = t.loc[t["category"] == int(Category.COLLECTIVE)]
    assert coll["pg"].str.contains("pp=0").any()
    assert (coll["step"] >= 0).all()


@pytest.mark.parametrize("name", ["forward-recv", "backward-send"])
def test_megatron_last_stage_p2p(shared_traces: Path, name: str) -> None:
    from gpuprof.readers import load_all

    last = next(
        t for t in load_all([shared_traces / "megatron-pp4-timeline"]) if t.parallel.get("pp_rank") == 3
    )
    t = build_comms(last, -np.inf, np.inf)
    assert (t["name"] == name).sum() == 4 * len(last.steps)
    assert not t["name"].isin(["forward-send", "backward-recv"]).any()
