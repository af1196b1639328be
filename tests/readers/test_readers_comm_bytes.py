"""Message sizes of communication kernels and the Python-stacks flag, as the Kineto reader
gives them: on constructed traces whose answers are known by construction, and on real
traces checked against their raw JSON."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuprof.model.dtypes import input_bytes, message_bytes
from gpuprof.model.timeline import Category, RankTrace
from gpuprof.readers import chunks, load_all, load_file

Builder = Callable[..., dict[str, Any]]
WriteTrace = Callable[..., Path]

CPU = 4321
GPU = 0


def _msg(in_n: Any, out_n: Any, dtype: Any) -> dict[str, Any]:
    return {"In msg nelems": in_n, "Out msg nelems": out_n, "dtype": dtype}


def _collective(
    event: Builder,
    ts: float,
    corr: int,
    kernel: str,
    host_args: dict[str, Any] | None,
    kernel_args: dict[str, Any] | None = None,
    coll: str = "allreduce",
) -> list[dict[str, Any]]:
    """c10d op > record_param_comms (with ``host_args``) > launch, and the kernel it starts."""
    rpc_args = {"Collective name": coll, "Process Group Name": "0", **(host_args or {})}
    return [
        event("cpu_op", f"c10d::{coll}_", ts, 50, pid=CPU, tid=CPU),
        event("cpu_op", "record_param_comms", ts + 1, 40, pid=CPU, tid=CPU, **rpc_args),
        event("cuda_runtime", "cudaLaunchKernel", ts + 2, 5, pid=CPU, tid=CPU, correlation=corr),
        event(
            "kernel", kernel, ts + 100, 80, pid=GPU, tid=7, stream=7, correlation=corr, **(kernel_args or {})
        ),
    ]


def _load_one(write_trace: WriteTrace, doc: dict[str, Any]) -> RankTrace:
    (t,) = load_file(write_trace("trace.json", doc))
    return t


def _bytes_of(t: RankTrace, kernel: str) -> list[int]:
    dev = t.device
    return [int(b) for b in dev.loc[dev["name"].astype(str) == kernel, "bytes"]]


def test_bytes_from_the_kernels_own_args(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    events = [
        # all-gather: output 8 x input; the larger message counts. Host op says otherwise:
        # the kernel's own args win.
        *_collective(
            event,
            0,
            1,
            "ncclDevKernel_AllGather_RING_LL",
            _msg(1, 1, "Float"),
            _msg(100, 800, "BFloat16") | {"Collective name": "_allgather_base"},
            coll="_allgather_base",
        ),
        # reduce-scatter: the input is the larger one.
        *_collective(event, 1000, 2, "ncclKernel_ReduceScatter_RING", None, _msg(4096, 512, "Float")),
    ]
    t = _load_one(write_trace, kineto(events))
    assert _bytes_of(t, "ncclDevKernel_AllGather_RING_LL") == [800 * 2]
    assert _bytes_of(t, "ncclKernel_ReduceScatter_RING") == [4096 * 4]


def test_bytes_from_the_enclosing_record_param_comms(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    events = [
        *_collective(event, 0, 1, "ncclDevKernel_Generic", _msg(2_873_320, 2_873_320, "BFloat16")),
        *_collective(event, 1000, 2, "ncclKernel_AllReduce_RING_LL_Sum_float", _msg(10, 10, "Double")),
        # A compute kernel and a copy keep their own meaning of bytes.
        event("cuda_runtime", "cudaLaunchKernel", 2000, 5, pid=CPU, tid=CPU, correlation=3),
        event("kernel", "ampere_sgemm", 2010, 50, pid=GPU, tid=7, stream=7, correlation=3),
        event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 2100, 5, pid=GPU, tid=7, stream=7, bytes=64),
    ]
    t = _load_one(write_trace, kineto(events))
    assert _bytes_of(t, "ncclDevKernel_Generic") == [2_873_320 * 2]
    assert _bytes_of(t, "ncclKernel_AllReduce_RING_LL_Sum_float") == [80]
    assert _bytes_of(t, "ampere_sgemm") == [-1]
    assert _bytes_of(t, "Memcpy HtoD (Pinned -> Device)") == [64]
    host = t.host
    rpc = host[host["name"].astype(str) == "record_param_comms"]
    assert sorted(rpc["bytes"]) == [80, 2_873_320 * 2]
    assert (host.loc[host["name"].astype(str) != "record_param_comms", "bytes"] == -1).all()


@pytest.mark.parametrize(
    "host_args, kernel_args",
    [
        (_msg(10, 10, "Float4_e2m1fn_x2"), None),  # a dtype the table does not know
        (_msg(None, None, "Float"), None),  # no counts
        ({"dtype": "Float"}, None),
        (_msg(10, 10, None), None),
        (_msg(-1, "12", "Float"), None),  # negative / not a number
        (None, None),  # nothing said anywhere
        (_msg(10, 10, "NoSuchType"), _msg(10, 10, "NoSuchType")),
    ],
)
def test_unknown_message_is_minus_one(
    write_trace: WriteTrace,
    kineto: Builder,
    event: Builder,
    host_args: dict[str, Any] | None,
    kernel_args: dict[str, Any] | None,
) -> None:
    events = _collective(event, 0, 1, "ncclKernel_AllReduce_RING_LL_Sum_float", host_args, kernel_args)
    t = _load_one(write_trace, kineto(events))
    assert _bytes_of(t, "ncclKernel_AllReduce_RING_LL_Sum_float") == [-1]
    assert (t.host["bytes"] == -1).all()


def test_unusable_kernel_args_fall_back_to_the_enclosing_op(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    kernel_args = _msg(10, 10, "NoSuchType")
    events = _collective(
        event, 0, 1, "ncclKernel_AllReduce_RING_LL_Sum_float", _msg(10, 10, "Float"), kernel_args
    )
    t = _load_one(write_trace, kineto(events))
    assert _bytes_of(t, "ncclKernel_AllReduce_RING_LL_Sum_float") == [40]


def test_message_bytes_arithmetic() -> None:
    assert message_bytes(25_136, 201_088, "BFloat16") == 402_176
    assert message_bytes(3, 3, "ComplexDouble") == 48
    assert message_bytes(7, None, "Char") == 7
    assert message_bytes(True, True, "Float") is None  # a flag is not a count
    assert message_bytes(float("inf"), 1, "Float") == 4
    assert message_bytes(1, 1, 4) is None


MULTIMEM = "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)"


def _symm_mem(event: Builder, ts: float, corr: int, dims: Any, types: Any) -> list[dict[str, Any]]:
    """A symm_mem all-reduce as vLLM records it: no nelems, only the op's input shapes and types."""
    shapes = {"Input Dims": dims, "Input type": types}
    return [
        event("cpu_op", "symm_mem::multimem_all_reduce_", ts, 50, pid=CPU, tid=CPU, **shapes),
        event("cuda_runtime", "cudaLaunchKernel", ts + 2, 5, pid=CPU, tid=CPU, correlation=corr),
        event("kernel", MULTIMEM, ts + 100, 80, pid=GPU, tid=7, stream=7, correlation=corr),
    ]


def test_bytes_from_input_shapes_when_no_nelems(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    mm_shapes = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}
    events = [
        *_symm_mem(event, 0, 1, [[2557440], [], []], ["c10::BFloat16", "", ""]),
        *_symm_mem(event, 1000, 2, [[4, 1024], [], []], ["float", "", ""]),
        *_symm_mem(event, 2000, 3, [[8], [], []], ["c10::Float8_e4m3fn", "", ""]),
        *_symm_mem(event, 3000, 4, [[8], [], []], ["NoSuchType", "", ""]),  # unknown type
        *_symm_mem(event, 4000, 5, [[], [], []], ["Scalar", "", ""]),  # not a tensor
        *_symm_mem(event, 5000, 6, "[[8]]", ["float"]),  # not a list: ignored
        # Not a communication op: its input shapes are no message size.
        event("cpu_op", "aten::mm", 6000, 50, pid=CPU, tid=CPU, **mm_shapes),
    ]
    t = _load_one(write_trace, kineto(events))
    assert _bytes_of(t, MULTIMEM) == [2557440 * 2, 4 * 1024 * 4, 8, -1, -1, -1]
    host = t.host
    assert list(host.loc[host["name"].astype(str) == "aten::mm", "bytes"]) == [-1]


def test_nelems_win_over_input_shapes(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    shapes = {"Input Dims": [[999]], "Input type": ["double"]}
    events = _collective(
        event, 0, 1, "ncclKernel_AllReduce_RING_LL_Sum_float", {**_msg(10, 10, "Float"), **shapes}
    )
    t = _load_one(write_trace, kineto(events))
    assert _bytes_of(t, "ncclKernel_AllReduce_RING_LL_Sum_float") == [40]


def test_input_bytes_arithmetic() -> None:
    assert input_bytes([[2557440], [], []], ["c10::BFloat16", "", ""]) == 5_114_880
    assert input_bytes([[2, 3, 4]], ["long int"]) == 192
    assert input_bytes([[3], [12]], ["c10::Half", "c10::Half"]) == 24  # the larger input: a reduce-scatter's
    assert input_bytes([[5], [7]], ["double", "int"]) == 40
    assert input_bytes([[[4], [4]], []], ["GenericList", ""]) is None  # a tensor list
    assert input_bytes([[True, 2]], ["float"]) is None
    assert input_bytes([[-1, 2]], ["float"]) is None
    assert input_bytes([[2**62]], ["float"]) is None
    assert input_bytes(None, ["float"]) is None
    assert input_bytes([[4]], "float") is None


@pytest.mark.parametrize(
    "frames, top, expected",
    [
        (True, {}, True),  # python_function events, even though most are dropped
        (False, {"with_stack": 1}, True),  # Kineto writes 1 / 0
        (False, {"with_stack": True}, True),
        (False, {"with_stack": "true"}, True),
        (False, {"with_stack": 0}, False),
        (False, {"with_stack": False}, False),
        (False, {}, False),
    ],
)
def test_python_stacks_flag(
    write_trace: WriteTrace,
    kineto: Builder,
    event: Builder,
    frames: bool,
    top: dict[str, Any],
    expected: bool,
) -> None:
    events = [
        event("user_annotation", "ProfilerStep#1", 0, 1000, pid=CPU, tid=CPU),
        event("cpu_op", "aten::mm", 10, 50, pid=CPU, tid=CPU),
    ]
    if frames:
        events.append(event("python_function", "train.py(10): step", 0, 900, pid=CPU, tid=CPU))
    t = _load_one(write_trace, kineto(events, **top))
    assert t.python_stacks is expected
    assert "train.py(10): step" not in set(t.host["name"].astype(str))  # still dropped


def test_with_stack_after_the_events_is_seen_when_read_in_pieces(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [event("cpu_op", f"aten::op{i}", 10.0 * i, 5, pid=CPU, tid=CPU) for i in range(60)]
    doc = kineto(events)
    doc["with_stack"] = 1  # written after traceEvents: only the last piece holds it
    path = write_trace("t.json", json.dumps(doc, indent=1))
    monkeypatch.setattr(chunks, "TARGET_BYTES", 400)
    (t,) = load_file(path)
    assert t.python_stacks is True


# Real traces -------------------------------------------------------------------------


def _raw_events(folder: Path) -> list[dict[str, Any]]:
    (path,) = sorted(folder.glob("*.json.gz"))
    with gzip.open(path) as fh:
        return list(json.load(fh)["traceEvents"])


def test_mi300_all_reduce_bytes(shared_traces: Path) -> None:
    folder = shared_traces / "mi300-resnet-ckpt-rank0"
    (t,) = load_all([folder])
    assert t.python_stacks
    dev = t.device
    comm = dev[dev["category"] == int(Category.COLLECTIVE)].sort_values("start_us")
    allreduce = comm[comm["coll_name"].astype(str) == "allreduce"]
    # The raw trace: each step's record_param_comms for allreduce, in order.
    raw = _raw_events(folder)
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in raw
        if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")
    )
    rpc = sorted(
        (e["ts"], e["args"])
        for e in raw
        if e.get("name") == "record_param_comms" and e["args"].get("Collective name") == "allreduce"
    )
    assert len(steps) == 3 and len(rpc) == len(allreduce) == 6
    for lo, hi in steps:
        first_raw = next(a for ts, a in rpc if lo <= ts < hi)
        assert (first_raw["In msg nelems"], first_raw["dtype"]) == (2_873_320, "BFloat16")
        first_kernel = allreduce[(allreduce["start_us"] >= lo)].iloc[0]
        assert int(first_kernel["bytes"]) == 2_873_320 * 2
    # Every allreduce and broadcast kernel the trace sized is sized; the ones launched
    # before the trace began (no launch, no args) stay unknown.
    sized = comm[comm["coll_name"].astype(str) != ""]
    assert (sized["bytes"] > 0).all() and len(sized) == 12
    assert (comm.loc[comm["coll_name"].astype(str) == "", "bytes"] == -1).all()


def test_b200_allgather_base_bytes(shared_traces: Path) -> None:
    folder = shared_traces / "b200-eager-rank0"
    (t,) = load_all([folder])
    assert t.python_stacks
    raw = [
        e["args"]
        for e in _raw_events(folder)
        if e.get("cat") == "kernel" and e.get("args", {}).get("Collective name") == "_allgather_base"
    ]
    assert len(raw) == 1
    expected = max(raw[0]["In msg nelems"], raw[0]["Out msg nelems"]) * 2
    assert raw[0]["dtype"] == "BFloat16" and expected == 402_176
    dev = t.device
    ag = dev[dev["coll_name"].astype(str) == "_allgather_base"]
    assert list(ag["bytes"]) == [expected]


def test_a100_kernel_bytes_match_their_args(shared_traces: Path) -> None:
    folder = shared_traces / "a100-2rank-nccl"
    (t,) = load_all([folder])
    assert not t.python_stacks
    sizes = {"Float": 4, "Long": 8}
    expected = sorted(
        max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) * sizes[e["args"]["dtype"]]
        for e in _raw_events(folder)
        if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})
    )
    dev = t.device
    comm = dev[dev["category"] == int(Category.COLLECTIVE)]
    assert len(expected) == len(comm) > 0
    assert sorted(comm["bytes"]) == expected


def test_resnet_has_no_python_stacks(shared_traces: Path) -> None:
    (t,) = load_all([shared_traces / "resnet50-nw0"])
    assert not t.python_stacks


def test_b200_symm_mem_all_reduce_bytes(shared_traces: Path) -> None:
    """The symm_mem all-reduces record only input shapes: each kernel gets its op's tensor size."""
    folder = shared_traces / "b200-eager-rank0"
    (t,) = load_all([folder])
    raw = _raw_events(folder)
    ops = sorted((e["ts"], e["args"]) for e in raw if e.get("name") == "symm_mem::multimem_all_reduce_")
    assert len(ops) == 73
    expected = []
    for _, args in ops:
        assert "In msg nelems" not in args and args["Input type"][0] == "c10::BFloat16"
        (n,) = args["Input Dims"][0]
        expected.append(n * 2)
    assert expected[0] == 2_557_440 * 2
    dev = t.device
    kernels = dev[dev["name"].astype(str).str.contains("multimem_all_reduce_kernel")].sort_values("start_us")
    assert list(kernels["bytes"]) == expected  # one kernel per op, in the same order
