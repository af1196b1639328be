"""The Kineto reader on small constructed traces whose answers are known by construction."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuprof.model.timeline import Category, CopyKind, Kind
from gpuprof.readers import load_file

Builder = Callable[..., dict[str, Any]]
WriteTrace = Callable[..., Path]

CPU = 1234  # host pid/tid
GPU = 0


def _launch(
    event: Builder, name: str, ts: float, corr: int, kernel: str, kts: float, kdur: float, **kargs: Any
) -> list[dict[str, Any]]:
    """A runtime launch on the host and the kernel it starts, tied by correlation."""
    return [
        event("cuda_runtime", name, ts, 5, pid=CPU, tid=CPU, correlation=corr),
        event("kernel", kernel, kts, kdur, pid=GPU, tid=7, stream=7, correlation=corr, **kargs),
    ]


def test_new_schema_tables(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    events = [
        event("user_annotation", "ProfilerStep#3", 0, 1000, pid=CPU, tid=CPU),
        event("user_annotation", "ProfilerStep#4", 1000, 1000, pid=CPU, tid=CPU),
        event("gpu_user_annotation", "ProfilerStep#3", 10, 990, pid=GPU, tid=7),  # GPU duplicate
        event("cpu_op", "aten::mm", 10, 50, pid=CPU, tid=CPU),
        *_launch(event, "cudaLaunchKernel", 20, 1, "ampere_sgemm_128x64_tn", 100, 200),
        event("cuda_runtime", "cudaMemcpyAsync", 400, 5, pid=CPU, tid=CPU, correlation=2),
        event(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            420,
            30,
            pid=GPU,
            tid=7,
            stream=7,
            correlation=2,
            bytes=4096,
        ),
        event("gpu_memset", "Memset (Device)", 460, 4, pid=GPU, tid=7, stream=7, correlation=3),
        event("cuda_runtime", "cudaStreamSynchronize", 500, 400, pid=CPU, tid=CPU, correlation=4),
        event("python_function", "train.py(10): step", 0, 2000, pid=CPU, tid=CPU),
        event("python_function", "torch/utils/data/dataloader.py(631): __next__", 1, 8, pid=CPU, tid=CPU),
        {"ph": "s", "id": 1, "pid": CPU, "tid": CPU, "ts": 20, "cat": "ac2g", "name": "ac2g"},
        {"ph": "M", "name": "process_labels", "pid": GPU, "tid": 0, "args": {"labels": "GPU 0"}},
    ]
    path = write_trace("trace.json", kineto(events, rank=3, world_size=4, device_name="NVIDIA H100"))
    (t,) = load_file(path)
    assert (t.rank, t.world_size, t.fmt) == (3, 4, "kineto")
    assert t.device_name == "NVIDIA H100" and t.device_memory_bytes == 80 * 2**30
    assert t.device_index == 0
    assert [(s.number, s.start_us, s.end_us) for s in t.steps] == [(3, 0, 1000), (4, 1000, 2000)]
    dev = t.device
    assert list(dev["kind"]) == [int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)]
    assert list(dev["category"]) == [int(Category.COMPUTE), int(Category.COPY), int(Category.MEMSET)]
    assert list(dev["start_us"]) == [100, 420, 460] and list(dev["end_us"]) == [300, 450, 464]
    assert list(dev["correlation"]) == [1, 2, 3]
    assert list(dev["stream"]) == [7, 7, 7]
    assert list(dev["bytes"]) == [-1, 4096, -1]
    assert list(dev["copy_kind"]) == [int(CopyKind.NONE), int(CopyKind.HTOD), int(CopyKind.NONE)]
    assert list(dev["pageable"]) == [False, True, False]
    host = t.host
    by_name = dict(zip(host["name"].astype(str), host["category"]))
    assert by_name["cudaLaunchKernel"] == Category.LAUNCH
    assert by_name["cudaStreamSynchronize"] == Category.SYNC
    assert by_name["aten::mm"] == Category.OTHER
    assert by_name["ProfilerStep#3"] == Category.STEP
    # 2 steps, 1 op, 3 runtime calls and the one Python frame that tells something (the
    # data loader); plain Python frames, flows and metadata are not host activity rows.
    assert len(host) == 7
    assert "train.py(10): step" not in by_name
    assert by_name["torch/utils/data/dataloader.py(631): __next__"] == Category.DATALOAD
    assert set(host["tid"]) == {CPU}
    assert t.warnings == ()


def test_old_schema_bare_list_with_string_tids(write_trace: WriteTrace, event: Builder) -> None:
    events = [
        event("Operator", "ProfilerStep#7", 0, 500, pid=CPU, tid="4093687616"),
        event(
            "Operator",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            5,
            50,
            pid=CPU,
            tid="4093687616",
        ),
        event("Runtime", "cudaLaunchKernel", 100, 5, pid=CPU, tid="4093687616", correlation=9),
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "volta_sgemm",
            "pid": GPU,
            "tid": "stream 7",
            "ts": 120,
            "dur": 30,
            "args": {"device": 0, "stream": 7, "correlation": 9, "external id": 3},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy DtoH (Device -> Pinned)",
            "pid": GPU,
            "tid": "stream 9",
            "ts": 200,
            "dur": 10,
            "args": {"correlation": 10, "bytes": 8},
        },
        {
            "ph": "f",
            "id": 9,
            "pid": GPU,
            "tid": "stream 7",
            "ts": 120,
            "cat": "async",
            "name": "launch",
            "bp": "e",
        },
    ]
    (t,) = load_file(write_trace("rank-5.json", events))
    assert t.rank == 5  # no distributedInfo in the old schema: the file name says
    assert [s.number for s in t.steps] == [7]
    assert list(t.device["name"].astype(str)) == ["volta_sgemm", "Memcpy DtoH (Device -> Pinned)"]
    # The copy has no stream in its args: the row ("stream 9") says which.
    assert list(t.device["stream"]) == [7, 9]
    assert list(t.device["copy_kind"]) == [int(CopyKind.NONE), int(CopyKind.DTOH)]
    assert set(t.host["tid"]) == {4093687616}
    cats = dict(zip(t.host["name"].astype(str), t.host["category"]))
    assert cats["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] == Category.DATALOAD
    assert cats["ProfilerStep#7"] == Category.STEP


def _comm_trace(event: Builder, kineto: Builder, outer: str, inner: str, coll: str | None) -> dict[str, Any]:
    rpc_args: dict[str, Any] = {} if coll is None else {"Collective name": coll, "Process Group Name": "7"}
    return kineto(
        [
            event("cpu_op", outer, 0, 100, pid=CPU, tid=CPU),
            event("cpu_op", "record_param_comms", 1, 98, pid=CPU, tid=CPU, **rpc_args),
            event("cpu_op", inner, 2, 96, pid=CPU, tid=CPU),
            *_launch(
                event,
                "cudaLaunchKernel",
                10,
                5,
                "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)",
                50,
                400,
            ),
            # A second SendRecv launched outside any op: the name alone decides (P2P).
            *_launch(
                event,
                "cudaLaunchKernel",
                200,
                6,
                "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)",
                500,
                50,
            ),
        ],
        rank=0,
    )


def test_sendrecv_under_alltoall_is_a_collective(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    doc = _comm_trace(event, kineto, "c10d::alltoall_base_", "nccl:all_to_all", None)
    (t,) = load_file(write_trace("a2a.json", doc))
    assert list(t.device["category"]) == [int(Category.COLLECTIVE), int(Category.P2P)]
    assert list(t.device["coll_name"].astype(str)) == ["all_to_all", ""]


def test_sendrecv_under_send_is_p2p_and_takes_record_param_comms_args(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    doc = _comm_trace(event, kineto, "c10d::send", "nccl:send", "send")
    (t,) = load_file(write_trace("p2p.json", doc))
    assert list(t.device["category"]) == [int(Category.P2P), int(Category.P2P)]
    assert list(t.device["coll_name"].astype(str)) == ["send", ""]
    assert list(t.device["pg"].astype(str)) == ["7", ""]
    rpc = t.host[t.host["name"].astype(str) == "record_param_comms"]
    assert list(rpc["category"]) == [int(Category.P2P)]  # its Collective name says send


def test_kernel_args_win_over_launch_context(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    doc = kineto(
        [
            event("cpu_op", "nccl:all_reduce", 0, 100, pid=CPU, tid=CPU),
            *_launch(
                event,
                "cudaLaunchKernel",
                10,
                5,
                "ncclDevKernel_AllReduce_Sum_f32",
                50,
                40,
                **{"Collective name": "allreduce", "Process Group Name": "3"},
            ),
        ]
    )
    (t,) = load_file(write_trace("ar.json", doc))
    assert list(t.device["coll_name"].astype(str)) == ["allreduce"]
    assert list(t.device["pg"].astype(str)) == ["3"]


def test_several_gpus_keep_the_busiest_with_a_warning(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    events = [event("kernel", f"k{i}", 10 * i, 5, pid=1, tid=7) for i in range(3)]
    events.append(event("kernel", "other", 0, 5, pid=0, tid=7))
    doc = kineto(events, rank=1)
    doc["deviceProperties"] = [
        {"id": 0, "name": "GPU zero"},
        {"id": 1, "name": "GPU one", "totalGlobalMem": 7},
    ]
    (t,) = load_file(write_trace("multi.json", doc))
    assert t.device_index == 1 and len(t.device) == 3
    assert t.device_name == "GPU one" and t.device_memory_bytes == 7
    assert any("several GPUs" in w for w in t.warnings)


def test_cpu_only_trace_is_valid(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    doc = kineto([event("cpu_op", "gloo:all_reduce", 0, 10, pid=CPU, tid=CPU)], rank=2)
    doc["deviceProperties"] = []
    (t,) = load_file(write_trace("cpu.json", doc))
    assert len(t.device) == 0 and t.device_index is None and t.device_name is None
    assert list(t.host["category"]) == [int(Category.COLLECTIVE)]


def test_integers_beyond_64_bits_do_not_crash(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    huge = 2**70
    doc = kineto(
        [
            event("kernel", "ncclKernel_AllReduce", 0, 5, pid=GPU, tid=7, correlation=huge, stream=2**65),
            event("cpu_op", "record_param_comms", 0, 5, pid=CPU, tid=CPU, **{"Comms Id": huge}),
        ]
    )
    (t,) = load_file(write_trace("big.json", doc))
    assert list(t.device["correlation"]) == [-1]  # unusable as an id: unknown
    assert list(t.device["stream"]) == [7]  # falls back to the row


def test_memory_samples_and_distributed_info(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    mem = [
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": CPU,
            "tid": CPU,
            "ts": ts,
            "args": {
                "Device Type": dtype,
                "Device Id": dev,
                "Bytes": 512,
                "Total Allocated": alloc,
                "Total Reserved": 4096,
            },
        }
        for ts, dtype, dev, alloc in [(20, 1, 0, 1024), (10, 1, 0, 512), (15, 0, -1, 99), (30, 1, 1, 77)]
    ]
    doc = kineto([event("kernel", "k", 0, 5, pid=GPU, tid=7), *mem])
    doc["distributedInfo"] = {
        "backend": "nccl",
        "rank": 6,
        "world_size": 8,
        "pg_config": [
            {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 8, "ranks": list(range(8))},
            {"pg_name": "1", "pg_desc": "undefined", "ranks": [6, 7]},
        ],
    }
    (t,) = load_file(write_trace("mem.json", doc))
    # Only the rank's own GPU (0), in time order; CPU (-1) and GPU 1 samples are not its own.
    assert [(m.ts_us, m.allocated_bytes, m.reserved_bytes) for m in t.memory] == [
        (10, 512, 4096),
        (20, 1024, 4096),
    ]
    assert t.rank == 6 and t.world_size == 8
    assert [(g.name, g.description, g.ranks) for g in t.process_groups] == [
        ("0", "default_pg", tuple(range(8))),
        ("1", "undefined", (6, 7)),
    ]


def test_negative_durations_are_skipped_and_counted(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    doc = kineto(
        [
            event("kernel", "k", 100, -5, pid=GPU, tid=7),
            event("kernel", "ok", 120, 5, pid=GPU, tid=7),
            event("cpu_op", "op", 50, -1, pid=CPU, tid=CPU),
        ]
    )
    (t,) = load_file(write_trace("neg.json", doc))
    assert list(t.device["end_us"]) == [125.0] and len(t.host) == 0
    assert "2 events with a negative duration were skipped" in t.warnings


def test_odd_types_are_coerced(write_trace: WriteTrace, kineto: Builder) -> None:
    # A float pid and a null name would fail strict decoding; the loose path reads them.
    doc = kineto(
        [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0.0, "tid": 7, "ts": "100", "dur": 5},
            {"ph": "X", "cat": "cpu_op", "name": None, "pid": 1, "tid": 1, "ts": 0, "dur": 5},
        ]
    )
    (t,) = load_file(write_trace("odd.json", doc))
    assert list(t.device["start_us"]) == [100.0]
    assert list(t.host["name"].astype(str)) == [""]


def test_rocm_names(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    doc = kineto(
        [
            event("cpu_op", "c10d::allreduce_", 0, 100, pid=CPU, tid=CPU),
            event(
                "cpu_op", "record_param_comms", 1, 98, pid=CPU, tid=CPU, **{"Collective name": "allreduce"}
            ),
            *_launch(
                event,
                "hipExtLaunchKernel",
                10,
                1,
                "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
                50,
                40,
            ),
            event(
                "cuda_runtime", "hipMemcpyWithStream", 200, 50, pid=CPU, tid=CPU, correlation=2, stream="0x0"
            ),
            event(
                "gpu_memcpy",
                "Memcpy DtoH (Device -> Host)",
                210,
                10,
                pid=GPU,
                tid=0,
                correlation=2,
                kind="DtoH",
            ),
        ]
    )
    (t,) = load_file(write_trace("rocm.json", doc))
    assert list(t.device["category"]) == [int(Category.COLLECTIVE), int(Category.COPY)]
    assert list(t.device["coll_name"].astype(str)) == ["allreduce", ""]
    assert list(t.device["copy_kind"]) == [int(CopyKind.NONE), int(CopyKind.DTOH)]
    cats = dict(zip(t.host["name"].astype(str), t.host["category"]))
    assert cats["hipExtLaunchKernel"] == Category.LAUNCH and cats["hipMemcpyWithStream"] == Category.SYNC


def test_gzip_and_plain_read_the_same(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    doc = kineto([event("kernel", "k", 0, 5, pid=GPU, tid=7)], rank=0)
    (a,) = load_file(write_trace("a.json", doc))
    (b,) = load_file(write_trace("b.json.gz", doc, gz=True))
    (c,) = load_file(write_trace("c.trace", doc, gz=True))  # detected by content, not name
    assert a.device.equals(b.device) and a.device.equals(c.device)


def test_format_told_by_content(write_trace: WriteTrace, event: Builder) -> None:
    # A bare list with Kineto cats (no top-level keys) is Kineto ...
    (t,) = load_file(
        write_trace("x.json", [event("cpu_op", "aten::add", 0, 1), event("kernel", "k", 0, 1, pid=0)])
    )
    assert t.fmt == "kineto"
    # ... and one with other cats is an op-level timeline.
    traces = load_file(
        write_trace("y.json", [event("forward-compute", "forward-compute", 0, 1, pid=0, tid=0)])
    )
    assert [x.fmt for x in traces] == ["timeline"]


def test_rows_come_in_start_order_ties_in_file_order(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    # Threads and streams are written one after another, so the file is not in time order.
    doc = kineto(
        [
            event("cpu_op", "b", 20, 5, pid=CPU, tid=2),
            event("cpu_op", "c", 20, 1, pid=CPU, tid=2),
            event("kernel", "kb", 20, 5, pid=GPU, tid=8),
            event("cpu_op", "a", 10, 5, pid=CPU, tid=1),
            event("kernel", "ka", 10, 5, pid=GPU, tid=7),
            event("cpu_op", "d", 20, 3, pid=CPU, tid=1),
        ]
    )
    (t,) = load_file(write_trace("order.json", doc))
    assert list(t.host["name"].astype(str)) == ["a", "b", "c", "d"]
    assert list(t.host["tid"]) == [1, 2, 2, 1] and list(t.host["end_us"]) == [15, 25, 21, 23]
    assert list(t.device["name"].astype(str)) == ["ka", "kb"] and list(t.device["stream"]) == [7, 8]
