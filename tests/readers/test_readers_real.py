"""The readers on real traces from real jobs (``../shared/traces``).

Expected values are computed here from the raw JSON with the standard ``json`` module (an
independent path from the msgspec-based readers), or are facts stated by the traces'
README (8 ranks of DLRM, PP 4 x DP 2 for the Megatron timeline, ...).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprof.errors import BadTraceError
from gpuprof.model.timeline import Category, CopyKind, Kind, RankTrace
from gpuprof.readers import discover, load_all

DEVICE_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
FOLDERS = [
    "a100-2rank-nccl",
    "b200-eager-rank0",
    "dlrm-8rank",
    "edge-cpu-only-gloo",
    "edge-large-integer",
    "edge-mi250-minitoy",
    "edge-no-distributed-rank",
    "hta-sampled-2rank",
    "megatron-pp4-timeline",
    "mi300-resnet-ckpt-rank0",
    "resnet50-nw0",
    "resnet50-nw4",
]


@lru_cache(maxsize=8)
def _raw(path: Path) -> Any:
    return json.loads(gzip.open(path).read())


def _events(path: Path) -> list[dict[str, Any]]:
    doc = _raw(path)
    return doc if isinstance(doc, list) else doc["traceEvents"]


@lru_cache(maxsize=16)
def _load(folder: Path) -> list[RankTrace]:
    return load_all([folder])


def _counts(trace: RankTrace, column: str = "category", table: str = "device") -> Counter[Any]:
    df = getattr(trace, table)
    return Counter(df[column].tolist())


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_real_folder_loads(shared_traces: Path, folder: str) -> None:
    traces = _load(shared_traces / folder)
    assert traces, folder
    ranks = [t.rank for t in traces]
    assert len(set(ranks)) == len(ranks)
    for t in traces:
        assert t.fmt in ("kineto", "timeline")
        assert (t.device["end_us"] >= t.device["start_us"]).all()
        assert t.device["start_us"].is_monotonic_increasing
        assert t.host["start_us"].is_monotonic_increasing
        if t.fmt == "kineto":
            # Every device event of the rank's GPU in the file is in the table, no more.
            events = _events(Path(t.source))
            n_dev = sum(
                1
                for e in events
                if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS and e.get("pid") == t.device_index
            )
            assert len(t.device) == n_dev


def test_dlrm_has_eight_ranks_and_alltoall_sendrecv_is_collective(shared_traces: Path) -> None:
    traces = _load(shared_traces / "dlrm-8rank")
    assert [t.rank for t in traces] == list(range(8))
    for t in traces:
        assert t.world_size == 8
        assert t.device_name == "Tesla V100-SXM2-32GB"
        assert t.device_memory_bytes == 34079899648
        assert t.device_index == t.rank  # one GPU per rank, pid = GPU index
        assert [s.number for s in t.steps] == [10]
        events = _events(Path(t.source))
        n_sendrecv = sum(1 for e in events if e.get("cat") == "kernel" and "ncclKernel_SendRecv" in e["name"])
        n_allreduce = sum(
            1 for e in events if e.get("cat") == "kernel" and "ncclKernel_AllReduce" in e["name"]
        )
        assert n_sendrecv > 0 and n_allreduce > 0
        dev = t.device
        sendrecv = dev[dev["name"].astype(str).str.contains("ncclKernel_SendRecv")]
        assert len(sendrecv) == n_sendrecv
        # Launched under c10d::alltoall_base_ / nccl:all_to_all: an all-to-all, not P2P.
        assert (sendrecv["category"] == int(Category.COLLECTIVE)).all()
        assert set(sendrecv["coll_name"].astype(str)) == {"all_to_all"}
        allreduce = dev[dev["name"].astype(str).str.contains("ncclKernel_AllReduce")]
        assert len(allreduce) == n_allreduce
        assert (allreduce["category"] == int(Category.COLLECTIVE)).all()
        assert (dev["category"] == int(Category.P2P)).sum() == 0
        n_kernels = sum(1 for e in events if e.get("cat") == "kernel")
        assert (dev["kind"] == int(Kind.KERNEL)).sum() == n_kernels
        assert (dev["category"] == int(Category.COMPUTE)).sum() == n_kernels - n_sendrecv - n_allreduce


def test_megatron_timeline_has_eight_workers(shared_traces: Path) -> None:
    path = shared_traces / "megatron-pp4-timeline" / "timeline-ST.json.gz"
    traces = _load(shared_traces / "megatron-pp4-timeline")
    assert len(traces) == 8
    assert [t.rank for t in traces] == list(range(8))
    assert Counter(t.parallel["pp_rank"] for t in traces) == {0: 2, 1: 2, 2: 2, 3: 2}
    assert Counter(t.parallel["dp_rank"] for t in traces) == {0: 4, 1: 4}
    events = _events(path)
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    for t in traces:
        p = t.parallel
        assert t.fmt == "timeline"
        assert (p["pp_size"], p["tp_size"], p["dp_size"]) == (4, 1, 2)  # meta-ST.yaml
        # Megatron order: TP fastest, then DP, then PP.
        assert t.rank == (p["pp_rank"] * p["dp_size"] + p["dp_rank"]) * p["tp_size"] + p["tp_rank"]
        mine = [
            e
            for e in events
            if e.get("ph") == "X"
            and e["pid"] == p["dp_rank"]
            and names[(e["pid"], e["tid"])].startswith(f"PP rank {p['pp_rank']}, TP rank {p['tp_rank']},")
        ]
        assert len(t.device) == len(mine)
        assert (t.device["kind"] == int(Kind.TIMER)).all()
        assert sorted(t.device["step"].tolist()) == sorted(e["args"]["step"] for e in mine)
        assert sorted(t.device["mb_id"].tolist()) == sorted(e["args"]["mb_id"] for e in mine)
        step_numbers = sorted({e["args"]["step"] for e in mine})
        assert [s.number for s in t.steps] == step_numbers
        # The recorded steps are not consecutive (36 -> 259 ...) and the file's clock is
        # stitched, so every step spans its own ops alone: no filler between steps.
        spans = {
            n: (
                min(e["ts"] for e in mine if e["args"]["step"] == n),
                max(e["ts"] + e["dur"] for e in mine if e["args"]["step"] == n),
            )
            for n in step_numbers
        }
        for s in t.steps:
            assert (s.start_us, s.end_us) == pytest.approx(spans[s.number])
        assert sum(s.duration_us for s in t.steps) == pytest.approx(sum(b - a for a, b in spans.values()))
        assert all(a.end_us < b.start_us for a, b in zip(t.steps, t.steps[1:]))
        notes = [w for w in t.warnings if "non-consecutive steps" in w]
        assert len(notes) == 1 and "stitched" in notes[0]
        by_name = dict(zip(t.device["name"].astype(str), t.device["category"]))
        for name, cat in by_name.items():
            if name.endswith(("-send", "-recv")):
                assert cat == int(Category.P2P), name
            elif name.endswith("-compute"):
                assert cat == int(Category.COMPUTE), name
            elif name in ("grads-reduce-scatter", "params-all-gather", "embedding-grads-all-reduce"):
                assert cat == int(Category.COLLECTIVE), name


def test_mi300_rocm_names(shared_traces: Path) -> None:
    (t,) = _load(shared_traces / "mi300-resnet-ckpt-rank0")
    assert t.rank == 0 and t.world_size == 8
    assert t.device_name == "AMD Instinct MI300X"
    assert t.device_index == 2  # the GPU pid holding the events
    host = t.host
    names = host["name"].astype(str)
    for api, cat in [
        ("hipLaunchKernel", Category.LAUNCH),
        ("hipExtLaunchKernel", Category.LAUNCH),
        ("hipExtModuleLaunchKernel", Category.LAUNCH),
        ("hipMemcpyAsync", Category.LAUNCH),
        ("hipMemsetAsync", Category.LAUNCH),
        ("hipDeviceSynchronize", Category.SYNC),
        ("hipGetDevicePropertiesR0600", Category.OTHER),
    ]:
        rows = host[names == api]
        assert len(rows) > 0, api
        assert (rows["category"] == int(cat)).all(), api
    events = _events(Path(t.source))
    n_generic = sum(
        1 for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_Generic")
    )
    generic = t.device[t.device["name"].astype(str).str.startswith("ncclDevKernel_Generic")]
    assert len(generic) == n_generic > 0
    assert (generic["category"] == int(Category.COLLECTIVE)).all()
    # The collective name comes from record_param_comms around the hipExtLaunchKernel.
    assert {"allreduce", "broadcast"} <= set(generic["coll_name"].astype(str))
    assert [s.number for s in t.steps] == [15, 16, 17]


def test_resnet50_old_schema(shared_traces: Path) -> None:
    path = shared_traces / "resnet50-nw0" / "worker0.pt.trace.json.gz"
    (t,) = _load(shared_traces / "resnet50-nw0")
    events = _events(path)
    assert Counter(e.get("cat") for e in events)["Kernel"] == (t.device["kind"] == int(Kind.KERNEL)).sum()
    assert (t.device["kind"] == int(Kind.MEMSET)).sum() == sum(1 for e in events if e.get("cat") == "Memset")
    steps = sorted(
        int(e["name"].split("#")[1]) for e in events if str(e.get("name")).startswith("ProfilerStep#")
    )
    assert [s.number for s in t.steps] == steps
    # Old-schema tids are strings ("4093687616"); the table holds them as integers.
    op_tids = {int(e["tid"]) for e in events if e.get("cat") == "Operator"}
    assert set(t.host.loc[t.host["kind"] == int(Kind.OP), "tid"]) == op_tids
    assert set(t.device["stream"]) == {
        int(e["args"]["stream"]) for e in events if e.get("cat") in DEVICE_CATS
    }
    copies = t.device[t.device["kind"] == int(Kind.MEMCPY)]
    pageable_htod = copies[(copies["copy_kind"] == int(CopyKind.HTOD)) & copies["pageable"]]
    expected = [
        e for e in events if e.get("cat") == "Memcpy" and e["name"] == "Memcpy HtoD (Pageable -> Device)"
    ]
    assert len(pageable_htod) == len(expected) > 0
    assert sorted(pageable_htod["bytes"]) == sorted(e["args"]["bytes"] for e in expected)
    loader = t.host[t.host["category"] == int(Category.DATALOAD)]
    assert len(loader) > 0
    assert loader["name"].astype(str).str.startswith("enumerate(DataLoader)").all()
    # No distributedInfo and no rank in "worker0"? "worker0" is a rank hint: rank 0.
    assert t.rank == 0 and not t.warnings


def test_a100_collective_args_on_kernels(shared_traces: Path) -> None:
    (t,) = _load(shared_traces / "a100-2rank-nccl")
    dev = t.device
    allreduce = dev[dev["name"].astype(str).str.startswith("ncclKernel_AllReduce")]
    assert len(allreduce) > 0
    assert set(allreduce["coll_name"].astype(str)) == {"allreduce"}
    assert set(allreduce["pg"].astype(str)) == {"0"}
    assert t.process_groups[0].ranks == (0, 1)
    assert t.process_groups[0].description == "default_pg"
    # Kernels and their launching runtime calls share correlation ids.
    kcorr = set(dev.loc[dev["kind"] == int(Kind.KERNEL), "correlation"])
    rcorr = set(t.host.loc[t.host["kind"] == int(Kind.RUNTIME), "correlation"])
    assert len(kcorr & rcorr) > 0.9 * len(kcorr)


def test_b200_symmetric_memory_all_reduce(shared_traces: Path) -> None:
    (t,) = _load(shared_traces / "b200-eager-rank0")
    mm = t.device[t.device["name"].astype(str).str.contains("multimem_all_reduce")]
    assert len(mm) > 0
    assert (mm["category"] == int(Category.COLLECTIVE)).all()
    assert set(mm["coll_name"].astype(str)) == {"multimem_all_reduce"}  # from symm_mem::multimem_all_reduce_
    drivers = t.host[t.host["kind"] == int(Kind.DRIVER)]
    launches = drivers[drivers["name"].astype(str) == "cuLaunchKernelEx"]
    assert len(launches) > 0 and (launches["category"] == int(Category.LAUNCH)).all()


def test_edge_cases(shared_traces: Path) -> None:
    (gloo,) = _load(shared_traces / "edge-cpu-only-gloo")
    assert len(gloo.device) == 0 and not gloo.has_device_activity
    assert gloo.rank == 34 and gloo.world_size == 300
    doc = _raw(shared_traces / "edge-cpu-only-gloo" / "cpu-only-gloo.pt.trace.json.gz")
    assert len(gloo.process_groups) == len(doc["distributedInfo"]["pg_config"])
    assert gloo.device_name is None

    (big,) = _load(shared_traces / "edge-large-integer")
    assert len(big.device) == 1 and len(big.host) == 1
    assert int(big.device["category"].iloc[0]) == int(Category.COLLECTIVE)

    (norank,) = _load(shared_traces / "edge-no-distributed-rank")
    assert norank.rank == 0
    assert any("position in the folder listing" in n.text for n in norank.notices)

    (mi250,) = _load(shared_traces / "edge-mi250-minitoy")
    # ROCm's synchronous copy (behind .item()/.cpu()) blocks the host.
    sync_copy = mi250.host[mi250.host["name"].astype(str) == "hipMemcpyWithStream"]
    assert len(sync_copy) > 0 and (sync_copy["category"] == int(Category.SYNC)).all()
    assert mi250.device_index == 2
    assert mi250.device_name == "AMD Radeon Graphics"


def test_hta_sampled_ranks_from_distributed_info(shared_traces: Path) -> None:
    traces = _load(shared_traces / "hta-sampled-2rank")
    assert [t.rank for t in traces] == [0, 1]
    assert all(t.world_size == 128 for t in traces)
    for t in traces:
        pattern = re.compile(r"ProfilerStep#(\d+)")
        events = _events(Path(t.source))
        steps = sorted(
            {
                int(m.group(1))
                for e in events
                if e.get("cat") == "user_annotation" and (m := pattern.fullmatch(e["name"]))
            }
        )
        assert [s.number for s in t.steps] == steps


def test_discover_real_folder_order_and_hints(shared_traces: Path) -> None:
    sources = discover([shared_traces / "dlrm-8rank"])
    assert [s.rank_hint for s in sources] == list(range(8))
    assert [s.order for s in sources] == list(range(8))
    # meta-ST.yaml beside the timeline is not a trace.
    sources = discover([shared_traces / "megatron-pp4-timeline"])
    assert [s.path.name for s in sources] == ["timeline-ST.json.gz"]
    assert np.all(np.diff([s.order for s in sources]) >= 0)


def test_folder_of_all_real_jobs_names_them_instead_of_reading_them(shared_traces: Path) -> None:
    jobs = sorted(p.name for p in shared_traces.iterdir() if p.is_dir() and any(p.glob("*.json*")))
    with pytest.raises(BadTraceError) as info:
        discover([shared_traces])
    assert f"holds {len(jobs)} separate trace folders ({', '.join(jobs[:3])}, ...)" in info.value.message
