"""The simulator's other ways of writing a job: ROCm naming, and a Megatron-style timer timeline.

Both are checked against the structure of real traces (``../shared/traces`` or
``GPUPROF_SHARED_TRACES``:
``mi300-resnet-ckpt-rank0`` and ``megatron-pp4-timeline``, where present) and read back
through gpuprof's readers; the step times of the timeline are read back with plain JSON.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from gpuprof.errors import GpuprofError
from gpuprof.simulate import generate, read_truth

LANES = ("compute", "pp-comm", "tp-comm", "dp-comm", "misc")
PIPELINE = {"stages": 4, "dp": 2, "microbatches": 4, "stage_ms": 0.5, "steps": 3, "dist_opt": True}


def _load(path: Path) -> Any:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def megatron(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate("pipeline", tmp_path_factory.mktemp("megatron"), seed=2, layout="megatron", **PIPELINE)


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same job with Megatron's batched steady-state exchanges (megatron layout only)."""
    return generate(
        "pipeline", tmp_path_factory.mktemp("batched"), seed=2, layout="megatron", batched_p2p=True, **PIPELINE
    )


@pytest.fixture(scope="module")
def rocm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    knobs = {"stages": 2, "dp": 2, "microbatches": 2, "stage_ms": 0.5, "steps": 1}
    return generate("pipeline", tmp_path_factory.mktemp("rocm"), seed=2, platform="rocm", **knobs)


def _timeline(out: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = _load(out / "timeline-sim.json.gz")
    return events


# -- Megatron-style timeline ---------------------------------------------------------


def test_timeline_has_megatron_workers_threads_and_meta(megatron: Path) -> None:
    assert sorted(p.name for p in megatron.iterdir()) == ["meta-sim.yaml", "timeline-sim.json.gz", "truth"]
    meta = dict(line.split(": ") for line in (megatron / "meta-sim.yaml").read_text().splitlines())
    assert (meta["pp_size"], meta["dp_size"], meta["tp_size"], meta["world_size"]) == ("4", "2", "1", "8")
    events = _timeline(megatron)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {0: "DP rank [0]", 1: "DP rank [1]"}
    assert len(threads) == 4 * 2 * len(LANES)
    for (pid, tid), name in threads.items():
        m = re.fullmatch(r"PP rank (\d), TP rank 0, (\S+)", name)
        assert m, name
        pp, lane = int(m.group(1)), m.group(2)
        assert tid == (pp * 2 + pid) * len(LANES) + LANES.index(lane)  # Megatron's rank order
    # metadata comes after the ops, as in the real file
    kinds = [e["ph"] for e in events]
    assert kinds.index("M") == kinds.count("X") and set(kinds) == {"X", "M"}


def test_timeline_ops_and_args_follow_megatron(megatron: Path) -> None:
    events = [e for e in _timeline(megatron) if e["ph"] == "X"]
    lanes = {
        (e["pid"], e["tid"]): e["args"]["name"].rsplit(", ", 1)[1]
        for e in _timeline(megatron)
        if e["name"] == "thread_name"
    }
    where = {
        "forward-compute": "compute",
        "backward-compute": "compute",
        "optimizer": "compute",
        "forward-send": "pp-comm",
        "forward-recv": "pp-comm",
        "backward-send": "pp-comm",
        "backward-recv": "pp-comm",
        "grads-reduce-scatter": "dp-comm",
        "params-all-gather": "dp-comm",
        "optimizer-clip-main-grad": "dp-comm",
    }
    assert {e["name"] for e in events} == set(where)
    per_worker_step: dict[tuple[int, str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        assert e["cat"] == e["name"] and e["dur"] >= 0
        assert set(e["args"]) == {"step", "model_chunk", "mb_id", "seq_id"}
        assert lanes[(e["pid"], e["tid"])] == where[e["name"]]
        if where[e["name"]] != "compute" or e["name"] == "optimizer":
            assert e["args"]["mb_id"] == -1
        worker = e["tid"] // len(LANES)
        per_worker_step[(worker, e["name"], e["args"]["step"])].append(e)
    steps = {e["args"]["step"] for e in events}
    assert steps == {1, 2, 3}
    for worker in range(8):
        for step in steps:
            fwd = per_worker_step[(worker, "forward-compute", step)]
            assert sorted(e["args"]["mb_id"] for e in fwd) == [0, 1, 2, 3]
            assert sorted(e["args"]["seq_id"] for e in fwd) == [0, 1, 2, 3]
            assert len(per_worker_step[(worker, "backward-compute", step)]) == 4
    # the first stage receives no activations, the last sends none
    assert not any(e["name"] == "forward-recv" and e["tid"] // len(LANES) in (0, 1) for e in events)
    assert not any(e["name"] == "forward-send" and e["tid"] // len(LANES) in (6, 7) for e in events)


def test_steady_state_send_and_receive_are_one_batched_call(batched: Path) -> None:
    """As in the real timeline: send_forward_recv_backward is one span under both timers."""
    events = [e for e in _timeline(batched) if e["ph"] == "X" and e["tid"] // len(LANES) == 2]  # stage 1
    spans = defaultdict(set)
    for e in events:
        spans[(e["ts"], e["dur"])].add(e["name"])
    assert {"forward-send", "backward-recv"} in spans.values()
    assert {"backward-send", "forward-recv"} in spans.values()


def test_every_receive_ends_after_its_send_begins(batched: Path) -> None:
    """Matched by order per step (the k-th forward-send of stage s is the k-th
    forward-recv of stage s + 1), a transfer is never received before it is sent, and a
    batched exchange has the same span on both ranks."""
    events = [e for e in _timeline(batched) if e["ph"] == "X"]

    def ops(worker: int, name: str, step: int) -> list[dict[str, Any]]:
        chosen = [e for e in events if e["tid"] // len(LANES) == worker and e["name"] == name]
        return sorted((e for e in chosen if e["args"]["step"] == step), key=lambda e: e["args"]["seq_id"])

    same = 0
    for step in (1, 2, 3):
        for stage in range(3):
            for d in range(2):
                lo, hi = stage * 2 + d, (stage + 1) * 2 + d
                for src, dst, kind in ((lo, hi, "forward"), (hi, lo, "backward")):
                    sends, recvs = ops(src, f"{kind}-send", step), ops(dst, f"{kind}-recv", step)
                    assert len(sends) == len(recvs) == 4
                    for a, b in zip(sends, recvs):
                        assert b["ts"] + b["dur"] >= a["ts"]
                        same += (a["ts"], a["dur"]) == (b["ts"], b["dur"])
    assert same >= 3 * 3 * 2 * 2 * 2, "the steady-state exchanges share their span"


def test_timeline_step_times_agree_with_the_truth(megatron: Path) -> None:
    """Per worker, a step lasts from its first op to the next step's first op."""
    events = [e for e in _timeline(megatron) if e["ph"] == "X"]
    first: dict[tuple[int, int], float] = {}
    for e in events:
        key = (e["tid"] // len(LANES), e["args"]["step"])
        first[key] = min(first.get(key, e["ts"]), e["ts"])
    per_worker = [mean(first[(w, s + 1)] - first[(w, s)] for s in (1, 2)) for w in range(8)]
    assert read_truth(megatron)["whatif"]["baseline_step_us"] == pytest.approx(max(per_worker), rel=0.02)


def test_timeline_has_the_same_truth_as_the_kineto_traces(megatron: Path, tmp_path: Path) -> None:
    kineto = read_truth(generate("pipeline", tmp_path, seed=2, **PIPELINE))
    timeline = read_truth(megatron)
    assert timeline["layout"] == "megatron" and kineto["layout"] == "kineto"
    assert set(timeline["files"].values()) == {"timeline-sim.json.gz"}
    for key in ("ranks", "whatif", "expected", "knobs"):
        assert timeline[key] == kineto[key]


def test_timeline_reads_back_as_one_worker_per_rank(megatron: Path) -> None:
    readers = pytest.importorskip("gpuprof.readers")
    traces = sorted(readers.load_all([megatron]), key=lambda t: t.rank)
    assert [t.rank for t in traces] == list(range(8))
    for t in traces:
        assert t.fmt == "timeline" and len(t.steps) == 3
        assert (t.parallel["pp_rank"], t.parallel["dp_rank"]) == divmod(t.rank, 2)
        assert t.parallel["pp_size"] == 4 and t.parallel["dp_size"] == 2


def test_timeline_is_shaped_like_the_real_megatron_one(megatron: Path, shared_traces: Path) -> None:
    real_path = shared_traces / "megatron-pp4-timeline" / "timeline-ST.json.gz"
    if not real_path.is_file():
        pytest.skip(f"the real Megatron timeline is not at {real_path}")
    real = _load(real_path)
    ours = _timeline(megatron)
    for events in (real, ours):
        threads = [e for e in events if e["name"] == "thread_name"]
        assert {e["args"]["name"].rsplit(", ", 1)[1] for e in threads} == set(LANES)
        for e in threads:  # the same tid numbering in both
            pp = int(re.search(r"PP rank (\d+)", e["args"]["name"]).group(1))  # type: ignore[union-attr]
            lane = e["args"]["name"].rsplit(", ", 1)[1]
            assert e["tid"] == (pp * 2 + e["pid"]) * len(LANES) + LANES.index(lane)
    real_ops = {e["name"] for e in real if e["ph"] == "X"}
    assert {e["name"] for e in ours if e["ph"] == "X"} <= real_ops
    assert {tuple(sorted(e["args"])) for e in ours if e["ph"] == "X"} == {
        tuple(sorted(e["args"])) for e in real if e["ph"] == "X"
    }
    assert {type(e["pid"]) for e in ours} == {type(e["pid"]) for e in real} == {int}


def test_megatron_layout_is_for_pipelines_only(tmp_path: Path) -> None:
    with pytest.raises(GpuprofError, match="megatron layout is for pipeline"):
        generate("straggler", tmp_path / "out", layout="megatron")
    assert not (tmp_path / "out").exists()


# -- ROCm naming ---------------------------------------------------------------------


def test_rocm_traces_use_hip_and_rccl_names(rocm: Path) -> None:
    truth = read_truth(rocm)
    assert truth["platform"] == "rocm"
    for f in sorted(rocm.glob("rank*.pt.trace.json.gz")):
        doc = _load(f)
        assert {"roctracer_version", "hip_runtime_version", "hip_driver_version"} <= set(doc)
        assert doc["deviceProperties"][0]["name"] == "AMD Instinct MI300X"
        assert doc["deviceProperties"][0]["warpSize"] == 64
        events = doc["traceEvents"]
        runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
        assert runtime and all(e["name"].startswith("hip") and "cid" in e["args"] for e in runtime.values())
        assert "hipMemcpyWithStream" in {e["name"] for e in runtime.values()}, (
            ".item() is one synchronous copy"
        )
        kernels = [e for e in events if e.get("cat") == "kernel"]
        for k in kernels:
            assert set(k["args"]) == {"device", "stream", "correlation", "kind"}
            assert k["args"]["stream"] in (0, 1, 4, 5)
        rccl = [k for k in kernels if k["name"].startswith("nccl")]
        assert rccl and {k["name"] for k in rccl} == {
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
        }
        assert {runtime[k["args"]["correlation"]]["name"] for k in rccl} == {"hipExtLaunchKernel"}
        compute = {runtime[k["args"]["correlation"]]["name"] for k in kernels if k not in rccl}
        assert compute == {"hipLaunchKernel"}
        assert any(k["name"].startswith("Cijk_") for k in kernels), "hipBLASLt/Tensile GEMMs"
        copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
        assert copies and not any("Pinned" in e["name"] or "Pageable" in e["name"] for e in copies)


def test_rocm_traces_read_back_through_the_readers(rocm: Path) -> None:
    readers = pytest.importorskip("gpuprof.readers")
    traces = sorted(readers.load_all([rocm]), key=lambda t: t.rank)
    assert [t.rank for t in traces] == [0, 1, 2, 3]
    for t in traces:
        assert t.device_name == "AMD Instinct MI300X" and len(t.steps) == 1
        assert not t.warnings, t.warnings


def test_rocm_layout_matches_the_real_mi300_trace(rocm: Path, shared_traces: Path) -> None:
    real_dir = shared_traces / "mi300-resnet-ckpt-rank0"
    if not real_dir.is_dir():
        pytest.skip(f"the real MI300X trace is not at {real_dir}")
    real = _load(next(real_dir.glob("*.json.gz")))
    ours = _load(rocm / "rank0.pt.trace.json.gz")
    assert ours["deviceProperties"][0] == real["deviceProperties"][0] | {"id": 0}

    def shape(doc: dict[str, Any], cat: str, name: str) -> set[str]:
        return next(set(e["args"]) for e in doc["traceEvents"] if e.get("cat") == cat and e["name"] == name)

    assert shape(ours, "cuda_runtime", "hipLaunchKernel") == shape(real, "cuda_runtime", "hipLaunchKernel")
    rccl = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    assert shape(ours, "kernel", rccl) == shape(real, "kernel", rccl)


def test_unknown_platform_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GpuprofError, match="unknown platform"):
        generate("healthy", tmp_path / "out", platform="tpu")
    assert not (tmp_path / "out").exists()
