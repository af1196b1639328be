"""The simulator on its own: trace structure like real Kineto, exact ground truth, seeds.

Nothing here runs the analyzer; the accuracy of ``analyze`` on these traces is in
``e2e/test_accuracy.py``. The ground truth is checked against the traces themselves: compute
time recomputed from the kernels in the file must equal the truth's compute time.
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprof.errors import GpuprofError
from gpuprof.model import intervals as iv
from gpuprof.simulate import DEFAULT_LAYOUT, SCENARIOS, TRUTH_FILE, generate, knobs_of, read_truth
from gpuprof.simulate.schedules import stage_order, theoretical_bubble

# Small versions of every scenario: fast, but with every mechanism present.
SMALL: dict[str, dict[str, Any]] = {
    "healthy": {"steps": 2, "layers": 4},
    "pipeline": {"steps": 2, "microbatches": 4, "stage_ms": 0.5},
    "dp_exposed": {"steps": 2, "layers": 4, "ranks": 3},
    "dp_overlapped": {"steps": 2, "layers": 4, "ranks": 3},
    "straggler": {"steps": 2, "layers": 4, "ranks": 3, "slow_rank": 1},
    "imbalance": {"steps": 3, "layers": 4, "ranks": 3},
    "memory_pressure": {"steps": 2, "layers": 4},
    "input_bound": {"steps": 3, "layers": 4},
    "sync_heavy": {"steps": 2, "layers": 4},
    "launch_bound": {"steps": 2, "layers": 8},
    "alloc_churn": {"steps": 2, "layers": 3},
    "rl_post_training": {"steps": 2, "layers": 2, "tokens_min": 32, "tokens_max": 320, "reward_ms": 4.0},
    "megatron_slow_worker": {"microbatches": 4, "stage_ms": 0.5, "steps": 1},
    "megatron_uneven_data": {"dp": 4, "microbatches": 4, "stage_ms": 0.5, "steps": 2},
    "slow_host": {"steps": 2, "layers": 3, "ranks": 3, "slow_host_rank": 2},
    "dataloader_contention": {"steps": 3, "layers": 3},
    "megatron_slow_stage": {"dp": 2, "microbatches": 4, "steps": 1},
    "megatron_slow_link": {"dp": 2, "microbatches": 4, "steps": 1},
    "megatron_slow_dp_group": {"dp": 2, "microbatches": 4, "steps": 1},
}
# The scenarios written as Kineto traces unless told otherwise (the others: a timeline).
KINETO = sorted(n for n in SMALL if DEFAULT_LAYOUT.get(n, "kineto") == "kineto")


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc


def _trace_files(out: Path) -> list[Path]:
    truth = read_truth(out)
    return [out / f for _, f in sorted(truth["files"].items(), key=lambda kv: int(kv[0]))]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sim")
    return {name: generate(name, root / name, seed=1, **SMALL[name]) for name in KINETO}


def test_every_scenario_has_small_knobs() -> None:
    assert set(SMALL) == set(SCENARIOS)
    for name, knobs in SMALL.items():
        assert set(knobs) <= set(knobs_of(name))


@pytest.mark.parametrize("name", KINETO)
def test_trace_structure_matches_kineto(generated: dict[str, Path], name: str) -> None:
    out = generated[name]
    files = _trace_files(out)
    assert all(f.name.startswith("rank") and f.name.endswith(".pt.trace.json.gz") for f in files)
    assert not list(out.rglob("*.part")), "no temporary files are left behind"
    for rank, path in enumerate(files):
        doc = _load(path)
        assert doc["schemaVersion"] == 1
        rocm = read_truth(out)["platform"] == "rocm"
        assert doc["deviceProperties"][0]["name"].startswith("AMD Instinct" if rocm else "NVIDIA")
        assert isinstance(doc["baseTimeNanoseconds"], int)
        if len(files) > 1:
            info = doc["distributedInfo"]
            assert info["rank"] == rank and info["world_size"] == len(files)
            assert info["pg_config"][0]["ranks"] == list(range(len(files)))
        events = doc["traceEvents"]
        runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
        flows: dict[tuple[str, int], dict[str, Any]] = {
            (e["ph"], e["id"]): e for e in events if e.get("cat") == "ac2g"
        }
        host_ext = {e["args"]["External id"] for e in events if e.get("cat") in ("cpu_op", "user_annotation")}
        device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        assert device
        by_stream: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for e in device:
            corr = e["args"]["correlation"]
            rt = runtime[corr]  # every device op has its launch, with the same correlation
            assert rt["pid"] != e["pid"] and e["tid"] == e["args"]["stream"]
            assert rt["ts"] <= e["ts"], "a kernel never starts before its launch call"
            assert flows[("s", corr)]["ts"] == rt["ts"] and flows[("s", corr)]["tid"] == rt["tid"]
            assert flows[("f", corr)]["ts"] == e["ts"] and flows[("f", corr)]["pid"] == e["pid"]
            # device ops point at the operator that launched them (ROCm: through the launch)
            assert (rt if rocm else e)["args"]["External id"] in host_ext
            by_stream[e["args"]["stream"]].append((e["ts"], e["ts"] + e["dur"]))
        for spans in by_stream.values():
            spans.sort()
            for (_, end), (start, _) in itertools.pairwise(spans):
                assert start >= end - 3e-3, "operations on one stream never overlap (ns rounding aside)"
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        assert steps and all(e["cat"] == "user_annotation" for e in steps)
        for e in device:
            if "nccl" in e["name"].lower():
                assert e["name"].startswith("ncclDevKernel_")
                if rocm:
                    continue  # RCCL kernels carry no collective args
                for key in (
                    "Collective name",
                    "Process Group Name",
                    "Process Group Ranks",
                    "In msg nelems",
                    "dtype",
                ):
                    assert key in e["args"]


def test_collectives_have_the_host_ops_of_real_jobs(generated: dict[str, Path]) -> None:
    doc = _load(_trace_files(generated["dp_exposed"])[0])
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {"c10d::allreduce_", "record_param_comms", "nccl:all_reduce", "cudaLaunchKernelExC"} <= names
    assert any(str(n).startswith("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") for n in names)
    pp = _load(_trace_files(generated["pipeline"])[1])
    assert any(str(e.get("name")).startswith("ncclDevKernel_SendRecv") for e in pp["traceEvents"])
    assert any(str(e.get("name")).startswith("nccl:recv 1<-0") for e in pp["traceEvents"])


@pytest.mark.parametrize("name", KINETO)
def test_truth_partitions_each_window_and_matches_the_trace(generated: dict[str, Path], name: str) -> None:
    out = generated[name]
    truth = read_truth(out)
    assert truth["scenario"] == name and truth["seed"] == 1
    for rank_truth, path in zip(truth["ranks"], _trace_files(out)):
        lost = rank_truth["lost_us"]
        assert set(lost) == {
            "pipeline_bubble",
            "communication",
            "straggler",
            "memory",
            "dataloader",
            "sync",
            "host",
            "other",
        }
        total = rank_truth["compute_us"] + sum(lost.values())
        assert total == pytest.approx(rank_truth["window_us"], rel=1e-6)
        # every lost microsecond has a known reason in the simulator
        assert lost["other"] <= 1e-3 * rank_truth["window_us"]
        # recompute window and compute from the file alone
        events = _load(path)["traceEvents"]
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        lo = min(e["ts"] for e in steps)
        hi = max(e["ts"] + e["dur"] for e in steps)
        assert hi - lo == pytest.approx(rank_truth["window_us"], abs=0.01)
        kernels = [e for e in events if e.get("cat") == "kernel" and not e["name"].startswith("nccl")]
        compute = iv.clip(
            iv.union(np.array([e["ts"] for e in kernels]), np.array([e["ts"] + e["dur"] for e in kernels])),
            lo,
            hi,
        )
        assert iv.total(compute) == pytest.approx(rank_truth["compute_us"], rel=1e-4, abs=0.05)


@pytest.mark.parametrize("name", KINETO)
@pytest.mark.parametrize("seed", [0, 3])
def test_truth_top_cause_is_what_the_scenario_is_built_to_show(tmp_path: Path, name: str, seed: int) -> None:
    truth = read_truth(generate(name, tmp_path, seed=seed, **SMALL[name]))
    assert truth["expected"]["top_category"] == truth["expected"]["intended"]


def test_straggler_waits_are_on_the_fast_ranks(generated: dict[str, Path]) -> None:
    truth = read_truth(generated["straggler"])
    assert truth["expected"]["culprit_ranks"] == [1]
    share = [r["lost_us"]["straggler"] / r["window_us"] for r in truth["ranks"]]
    assert share[1] < 0.01
    assert share[0] > 0.15 and share[2] > 0.15


@pytest.mark.parametrize(
    "schedule,microbatches,chunks",
    [
        ("gpipe", 4, 1),
        ("gpipe", 8, 1),
        ("1f1b", 8, 1),
        ("1f1b", 16, 1),
        ("interleaved", 4, 2),
        ("interleaved", 8, 2),
    ],
)
def test_balanced_pipeline_bubble_matches_theory(
    tmp_path: Path, schedule: str, microbatches: int, chunks: int
) -> None:
    truth = read_truth(
        generate(
            "pipeline",
            tmp_path,
            schedule=schedule,
            microbatches=microbatches,
            chunks=chunks,
            act_mb=0.25,
            steps=2,
        )
    )
    exp = truth["expected"]
    assert exp["theoretical_bubble_fraction"] == pytest.approx(
        theoretical_bubble(schedule, 4, microbatches, chunks), abs=1e-6
    )
    # small transfers and launch latencies add a little to the schedule's own idle time
    assert (
        exp["theoretical_bubble_fraction"] - 0.002
        <= exp["measured_bubble_fraction"]
        <= exp["theoretical_bubble_fraction"] + 0.02
    )


def test_pipeline_times_data_parallel_has_megatron_layout_and_groups(tmp_path: Path) -> None:
    out = generate("pipeline", tmp_path, stages=2, dp=2, microbatches=2, steps=1, act_mb=0.5)
    docs = [_load(f) for f in _trace_files(out)]
    assert len(docs) == 4
    # rank = stage * dp + replica: rank 1 is stage 0 of replica 1, and sends to rank 3
    info = docs[1]["distributedInfo"]
    groups = {g["pg_desc"]: g["ranks"] for g in info["pg_config"]}
    assert groups == {
        "default_pg": [0, 1, 2, 3],
        "PIPELINE_MODEL_PARALLEL_GROUP": [1, 3],
        "DATA_PARALLEL_GROUP": [0, 1],
    }
    names = {e.get("name") for e in docs[1]["traceEvents"]}
    # ProcessGroupNCCL's titles number the ranks within the pipeline group [1, 3]
    assert "nccl:send 0->1" in names and "nccl:recv 0<-1" in names
    dp_kernels = [
        e
        for e in docs[1]["traceEvents"]
        if e.get("cat") == "kernel" and e["args"].get("Process Group Description") == "DATA_PARALLEL_GROUP"
    ]
    assert dp_kernels and all(e["args"]["Process Group Ranks"] == "[0, 1]" for e in dp_kernels)
    truth = read_truth(out)
    assert truth["expected"]["top_category"] == "pipeline_bubble"


def test_slow_stage_widens_the_bubble_and_names_the_stage(tmp_path: Path) -> None:
    truth = read_truth(generate("pipeline", tmp_path, slow_stage=2, slowdown=1.5, microbatches=4, steps=1))
    exp = truth["expected"]
    assert exp["culprit_ranks"] == [2]
    assert exp["measured_bubble_fraction"] > exp["theoretical_bubble_fraction"] + 0.05
    bubble = [r["lost_us"]["pipeline_bubble"] / r["window_us"] for r in truth["ranks"]]
    assert bubble[2] == min(bubble)


@pytest.mark.parametrize(
    "schedule,chunks", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 3)]
)
def test_schedules_run_every_microbatch_once_forward_before_backward(schedule: str, chunks: int) -> None:
    p, m = 4, 8
    for stage in range(p):
        order = stage_order(schedule, stage, p, m, chunks)
        v = chunks if schedule == "interleaved" else 1
        assert sorted(order) == sorted([(k, j, c) for k in "FB" for j in range(m) for c in range(v)])
        for j in range(m):
            for c in range(v):
                assert order.index(("F", j, c)) < order.index(("B", j, c))


def test_same_seed_same_bytes_other_seed_other_trace(tmp_path: Path) -> None:
    a = generate("straggler", tmp_path / "a", seed=5, **SMALL["straggler"])
    b = generate("straggler", tmp_path / "b", seed=5, **SMALL["straggler"])
    c = generate("straggler", tmp_path / "c", seed=6, **SMALL["straggler"])
    for f in _trace_files(a):
        assert f.read_bytes() == (b / f.name).read_bytes()
    assert (a / TRUTH_FILE).read_text() == (b / TRUTH_FILE).read_text()
    assert (a / "rank0.pt.trace.json.gz").read_bytes() != (c / "rank0.pt.trace.json.gz").read_bytes()


def test_a_second_run_into_the_same_folder_replaces_the_first(tmp_path: Path) -> None:
    generate("straggler", tmp_path, ranks=4, steps=1, layers=2)
    generate("healthy", tmp_path, steps=1, layers=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.pt.trace.json.gz", "truth"]
    assert sorted(p.name for p in (tmp_path / "truth").iterdir()) == ["ground_truth.json"]


def test_knobs_change_the_job(tmp_path: Path) -> None:
    few = read_truth(generate("healthy", tmp_path / "few", steps=1, layers=2))
    many = read_truth(generate("healthy", tmp_path / "many", steps=3, layers=6))
    assert many["ranks"][0]["window_us"] > 8 * few["ranks"][0]["window_us"]
    slow = read_truth(
        generate(
            "dp_exposed", tmp_path / "slow", link_gbs=2.0, **{k: v for k, v in SMALL["dp_exposed"].items()}
        )
    )
    fast = read_truth(
        generate(
            "dp_exposed", tmp_path / "fast", link_gbs=50.0, **{k: v for k, v in SMALL["dp_exposed"].items()}
        )
    )
    assert slow["ranks"][0]["lost_us"]["communication"] > 4 * fast["ranks"][0]["lost_us"]["communication"]


@pytest.mark.parametrize(
    "name,knobs,message",
    [
        ("nope", {}, "unknown scenario"),
        ("pipeline", {"microbatchs": 4}, "unknown knob"),
        ("pipeline", {"microbatches": "many"}, "expects a int"),
        ("pipeline", {"schedule": "interleaved", "microbatches": 6}, "divisible"),
        ("straggler", {"slow_rank": 9}, "slow_rank"),
    ],
)
def test_bad_knobs_are_one_clear_error_and_leave_no_files(
    tmp_path: Path, name: str, knobs: dict[str, Any], message: str
) -> None:
    with pytest.raises(GpuprofError, match=message):
        generate(name, tmp_path / "out", **knobs)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))


@pytest.mark.parametrize("name", KINETO)
def test_traces_read_back_through_the_readers(generated: dict[str, Path], name: str) -> None:
    readers = pytest.importorskip("gpuprof.readers")
    out = generated[name]
    truth = read_truth(out)
    traces = sorted(readers.load_all([out]), key=lambda t: t.rank)
    assert [t.rank for t in traces] == list(range(len(truth["ranks"])))
    for t, want in zip(traces, truth["ranks"]):
        assert t.fmt == "kineto" and len(t.device) > 0 and len(t.host) > 0
        assert len(t.steps) == truth["knobs"]["steps"]
        assert t.steps[-1].end_us - t.steps[0].start_us == pytest.approx(want["window_us"], abs=0.01)
        rocm = truth["platform"] == "rocm"
        assert t.device_name == ("AMD Instinct MI300X" if rocm else "NVIDIA H100 80GB HBM3")
        assert not t.warnings, t.warnings


def test_rl_writes_a_session_folder_with_samples(generated: dict[str, Path]) -> None:
    session = pytest.importorskip("gpuprof.session")
    out = generated["rl_post_training"]
    assert (out / "traces" / "rank0.pt.trace.json.gz").is_file()
    s = session.read_session(out)
    samples = s.samples
    assert len(samples) > 0
    util = samples["util_gpu_pct"].to_numpy(dtype=float)
    assert util.min() >= 0 and util.max() <= 100
    assert util.max() > 50, "the GPU is busy in rollout and training"
    assert (util < 20).any(), "and idle while the host scores rewards (or outside the run)"
