"""The simulator's what-if truth: each fixed job really lacks what its fix removes, and
differs from the original job by nothing else.

The fixed jobs are written with ``generate(..., whatif=FIX)`` and read back from their
files with plain JSON (never gpuprof's readers or analyzer). The step times are checked
against a simple reading of the written traces: the span of the ``ProfilerStep#`` ranges
over their count, the slowest rank's.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpuprof.errors import GpuprofError
from gpuprof.simulate import DEFAULT_LAYOUT, SCENARIOS, WHATIFS, generate, read_truth

# Small versions of every scenario (a few ms per step, one or two steps).
SMALL: dict[str, dict[str, Any]] = {
    "healthy": {"steps": 2, "layers": 3},
    "pipeline": {"steps": 1, "microbatches": 4, "stage_ms": 0.5},
    "dp_exposed": {"steps": 2, "layers": 3, "ranks": 3},
    "dp_overlapped": {"steps": 2, "layers": 3, "ranks": 3},
    "straggler": {"steps": 2, "layers": 3, "ranks": 3, "slow_rank": 1},
    "imbalance": {"steps": 2, "layers": 3, "ranks": 3},
    "memory_pressure": {"steps": 2, "layers": 3},
    "input_bound": {"steps": 2, "layers": 3},
    "sync_heavy": {"steps": 2, "layers": 3},
    "launch_bound": {"steps": 2, "layers": 6},
    "alloc_churn": {"steps": 2, "layers": 2},
    "rl_post_training": {"steps": 1, "layers": 2, "tokens_min": 16, "tokens_max": 64, "reward_ms": 2.0},
    "megatron_slow_worker": {"microbatches": 4, "stage_ms": 0.5, "steps": 1},
    "megatron_uneven_data": {"dp": 4, "microbatches": 4, "stage_ms": 0.5, "steps": 2},
    "slow_host": {"steps": 2, "layers": 3, "ranks": 3, "slow_host_rank": 0},
    "dataloader_contention": {"steps": 3, "layers": 3},
    "megatron_slow_stage": {"dp": 2, "microbatches": 8, "steps": 1},
    "megatron_slow_link": {"dp": 3, "microbatches": 4, "steps": 1},
    "megatron_slow_dp_group": {"dp": 2, "microbatches": 4, "steps": 1},
}
# Scenarios written as Kineto traces (the file-reading tests below need them).
KINETO = sorted(n for n in SMALL if DEFAULT_LAYOUT.get(n, "kineto") == "kineto")

# The fix each scenario is built to show (the truth must name it as intended).
INTENDED: dict[str, list[str]] = {
    "healthy": [],
    "pipeline": ["double_microbatches"],
    "dp_exposed": ["overlap_collectives", "double_bandwidth"],
    "dp_overlapped": [],
    "straggler": ["peer_median_compute"],
    "imbalance": ["peer_median_compute"],
    "memory_pressure": ["no_allocator"],
    "input_bound": ["no_dataloader"],
    "sync_heavy": ["no_sync"],
    "launch_bound": ["free_launches"],
    "alloc_churn": ["no_allocator", "free_launches"],
    "rl_post_training": ["peer_median_compute"],
    "megatron_slow_worker": ["peer_median_compute"],
    "megatron_uneven_data": ["balanced_stages", "balanced_batches"],
    "slow_host": ["peer_median_host"],
    "dataloader_contention": ["no_dataloader"],
    "megatron_slow_stage": ["balanced_stages"],
    "megatron_slow_link": ["peer_median_link"],
    "megatron_slow_dp_group": ["peer_median_collective"],
}

SYNC_CALLS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
}
ALLOCATOR_CALLS = {"cudaMalloc", "cudaFree", "hipMalloc", "hipFree"}


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        doc: dict[str, Any] = json.load(fh)
    return list(doc["traceEvents"])


def _rank_events(out: Path) -> list[list[dict[str, Any]]]:
    truth = read_truth(out)
    return [_events(out / f) for _, f in sorted(truth["files"].items(), key=lambda kv: int(kv[0]))]


def _step_us(events: list[dict[str, Any]]) -> float:
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    return (max(e["ts"] + e["dur"] for e in steps) - min(e["ts"] for e in steps)) / len(steps)


def _kernels(events: list[dict[str, Any]], nccl: bool = False) -> list[dict[str, Any]]:
    return sorted(
        (e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel") == nccl),
        key=lambda e: e["args"]["correlation"],
    )


@pytest.fixture(scope="module")
def truths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("whatif")
    return {name: generate(name, root / name, seed=3, **knobs) for name, knobs in SMALL.items()}


def test_every_scenario_has_small_knobs() -> None:
    assert set(SMALL) == set(SCENARIOS) == set(INTENDED)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_scenario_has_its_intended_fix_and_all(truths: dict[str, Path], name: str) -> None:
    wi = read_truth(truths[name])["whatif"]
    assert wi["intended"] == INTENDED[name]
    assert set(wi["intended"]) <= set(wi["applied"]) <= set(WHATIFS)
    assert set(wi["step_us"]) == set(wi["savings_pct"]) == {*wi["applied"], "all"}
    base = wi["baseline_step_us"]
    for fix, step in wi["step_us"].items():
        assert wi["savings_pct"][fix] == pytest.approx(100 * (1 - step / base), abs=2e-3)
        assert step > 0
    # no fix makes the job slower by more than noise, and all fixes together save the most
    # (no_variation is the bound the fixes are measured against, not one of them)
    assert min(wi["savings_pct"].values()) > -1.0
    fixes = {k: v for k, v in wi["savings_pct"].items() if k != "no_variation"}
    assert wi["savings_pct"]["all"] >= max(fixes.values()) - 0.5
    for fix in wi["intended"]:
        assert wi["savings_pct"][fix] > 3.0, f"{name}: {fix} is what the scenario is built to show"


@pytest.mark.parametrize("name", KINETO)
def test_baseline_step_agrees_with_the_written_traces(truths: dict[str, Path], name: str) -> None:
    """The truth's baseline step is what a simple reading of the files gives."""
    out = truths[name]
    wi = read_truth(out)["whatif"]
    read_back = max(_step_us(ev) for ev in _rank_events(out))
    assert wi["baseline_step_us"] == pytest.approx(read_back, rel=0.005)


def test_same_seed_same_truth_other_seed_other_truth(tmp_path: Path) -> None:
    a = read_truth(generate("straggler", tmp_path / "a", seed=5, **SMALL["straggler"]))
    b = read_truth(generate("straggler", tmp_path / "b", seed=5, **SMALL["straggler"]))
    c = read_truth(generate("straggler", tmp_path / "c", seed=6, **SMALL["straggler"]))
    assert a["whatif"] == b["whatif"]
    assert a["whatif"]["step_us"] != c["whatif"]["step_us"]


def test_written_fixed_job_has_the_truth_of_its_whatif(truths: dict[str, Path], tmp_path: Path) -> None:
    base = read_truth(truths["straggler"])["whatif"]
    fixed = generate("straggler", tmp_path, seed=3, whatif="peer_median_compute", **SMALL["straggler"])
    truth = read_truth(fixed)
    assert truth["fixes"] == ["peer_median_compute"]
    assert max(_step_us(ev) for ev in _rank_events(fixed)) == pytest.approx(
        base["step_us"]["peer_median_compute"], rel=0.005
    )
    # its own what-ifs leave the applied fix out
    assert "peer_median_compute" not in truth["whatif"]["applied"]


def test_no_sync_job_makes_no_sync_call_and_no_blocking_copy(truths: dict[str, Path], tmp_path: Path) -> None:
    base = _rank_events(truths["sync_heavy"])[0]
    fixed = _rank_events(generate("sync_heavy", tmp_path, seed=3, whatif="no_sync", **SMALL["sync_heavy"]))[0]
    names = {e.get("name") for e in fixed}
    assert not names & SYNC_CALLS
    assert {e.get("name") for e in base} & SYNC_CALLS, "the original job does sync"
    copies = [e for e in fixed if e.get("cat") == "gpu_memcpy"]
    assert copies and not any("Pageable" in e["name"] for e in copies)
    # every copy call returns before its copy is done (non-blocking)
    runtime = {e["args"]["correlation"]: e for e in fixed if e.get("cat") == "cuda_runtime"}
    for c in copies:
        call = runtime[c["args"]["correlation"]]
        assert call["ts"] + call["dur"] < c["ts"] + c["dur"]
    # all other work is the same: same kernels, same durations (same random draws)
    assert [k["dur"] for k in _kernels(fixed)] == [k["dur"] for k in _kernels(base)]


def test_peer_median_job_runs_the_slow_rank_at_its_peers_speed(
    truths: dict[str, Path], tmp_path: Path
) -> None:
    base = _rank_events(truths["straggler"])
    fixed = _rank_events(
        generate("straggler", tmp_path, seed=3, whatif="peer_median_compute", **SMALL["straggler"])
    )
    slow = SMALL["straggler"]["slow_rank"]
    for rank, (b, f) in enumerate(zip(base, fixed)):
        # the layers' and optimizer's kernels (the loss kernel has a fixed size in this model)
        before = [k["dur"] for k in _kernels(b) if "SoftMax" not in k["name"]]
        after = [k["dur"] for k in _kernels(f) if "SoftMax" not in k["name"]]
        assert len(before) == len(after) > 50
        if rank == slow:  # the same draws at 1.0x instead of 1.5x
            assert after == pytest.approx([d / 1.5 for d in before], rel=1e-4, abs=2e-3)
        else:
            assert after == before


def _compute_us(events: list[dict[str, Any]]) -> float:
    return float(sum(k["dur"] for k in _kernels(events) if "SoftMax" not in k["name"]))


def test_balanced_stages_job_gives_every_stage_the_mean_work(tmp_path: Path) -> None:
    knobs = {"steps": 1, "microbatches": 4, "stage_ms": 0.5, "slow_stage": 2, "slowdown": 1.8}
    base = [_compute_us(ev) for ev in _rank_events(generate("pipeline", tmp_path / "b", seed=3, **knobs))]
    fixed = _rank_events(generate("pipeline", tmp_path / "f", seed=3, whatif="balanced_stages", **knobs))
    after = [_compute_us(ev) for ev in fixed]
    assert base[2] > 1.6 * base[0]
    mean_factor = (3 + 1.8) / 4
    for b, a, f in zip(base, after, (1, 1, 1.8, 1)):
        assert a == pytest.approx(b * mean_factor / f, rel=1e-3)
    assert sum(after) == pytest.approx(sum(base), rel=1e-3), "total work unchanged"


def test_double_microbatches_job_runs_twice_as_many_half_size_microbatches(tmp_path: Path) -> None:
    knobs = {"steps": 1, "microbatches": 4, "stage_ms": 0.5}
    base = _rank_events(generate("pipeline", tmp_path / "b", seed=3, **knobs))
    fixed = _rank_events(generate("pipeline", tmp_path / "f", seed=3, whatif="double_microbatches", **knobs))
    for b, f in zip(base, fixed):

        def count(events: list[dict[str, Any]], name: str) -> int:
            return sum(e.get("name") == name for e in events)

        assert count(b, "forward_step") == 4 and count(f, "forward_step") == 8
        assert count(f, "backward_step") == 8
        assert _compute_us(f) == pytest.approx(_compute_us(b), rel=0.05), "the same work in all"
        sends = [e for e in f if str(e.get("name", "")).startswith("ncclDevKernel_SendRecv")]
        base_sends = [e for e in b if str(e.get("name", "")).startswith("ncclDevKernel_SendRecv")]
        assert len(sends) == 2 * len(base_sends)
        if sends:
            assert sends[0]["args"]["In msg nelems"] * 2 == base_sends[0]["args"]["In msg nelems"]


def test_no_allocator_job_calls_no_allocator(tmp_path: Path) -> None:
    out = generate("alloc_churn", tmp_path / "fixed", seed=3, whatif="no_allocator", **SMALL["alloc_churn"])
    names = {e.get("name") for e in _rank_events(out)[0]}
    assert not names & ALLOCATOR_CALLS
    base = generate("alloc_churn", tmp_path / "base", seed=3, **SMALL["alloc_churn"])
    assert {"hipMalloc", "hipFree"} <= {e.get("name") for e in _rank_events(base)[0]}


def test_no_dataloader_job_waits_for_no_batch(tmp_path: Path) -> None:
    out = generate("input_bound", tmp_path, seed=3, whatif="no_dataloader", **SMALL["input_bound"])
    waits = [e for e in _rank_events(out)[0] if "DataLoader" in str(e.get("name"))]
    assert waits and max(e["dur"] for e in waits) < 10.0


def test_free_launches_job_spends_no_host_time_in_operators_or_launches(tmp_path: Path) -> None:
    out = generate("launch_bound", tmp_path, seed=3, whatif="free_launches", **SMALL["launch_bound"])
    events = _rank_events(out)[0]
    launches = [e for e in events if e.get("name") in ("cudaLaunchKernel", "cudaMemcpyAsync")]
    assert launches and all(e["dur"] == 0 for e in launches if e["name"] == "cudaLaunchKernel")
    linear = [e for e in events if e.get("name") == "aten::linear"]
    assert linear and all(e["dur"] == 0 for e in linear)
    # Python outside operators stays (zero_grad's host time)
    zero_grad = [e for e in events if str(e.get("name", "")).startswith("Optimizer.zero_grad")]
    assert zero_grad and min(e["dur"] for e in zero_grad) > 10.0


def test_overlapped_collectives_take_no_transfer_time(truths: dict[str, Path], tmp_path: Path) -> None:
    fixed = _rank_events(
        generate("dp_exposed", tmp_path, seed=3, whatif="overlap_collectives", **SMALL["dp_exposed"])
    )
    # each all-reduce ends when its last rank arrives: on that rank the kernel lasts ~0
    for per_rank in zip(*(_kernels(ev, nccl=True) for ev in fixed)):
        ends = {round(k["ts"] + k["dur"], 1) for k in per_rank}
        assert len(ends) == 1 and min(k["dur"] for k in per_rank) < 1e-2


def test_double_bandwidth_halves_every_transfer(truths: dict[str, Path], tmp_path: Path) -> None:
    base = _rank_events(truths["dp_exposed"])
    fixed = _rank_events(
        generate("dp_exposed", tmp_path, seed=3, whatif="double_bandwidth", **SMALL["dp_exposed"])
    )
    # the last rank to arrive waits for no one: its kernel is the transfer alone
    for b_k, f_k in zip(
        zip(*(_kernels(ev, nccl=True) for ev in base)), zip(*(_kernels(ev, nccl=True) for ev in fixed))
    ):
        assert min(k["dur"] for k in f_k) == pytest.approx(min(k["dur"] for k in b_k) / 2, rel=1e-3)


def test_a_fix_that_does_not_apply_changes_nothing(truths: dict[str, Path], tmp_path: Path) -> None:
    # the straggler job calls no allocator: no_allocator has nothing to remove
    assert "no_allocator" not in read_truth(truths["straggler"])["whatif"]["applied"]
    fixed = generate("straggler", tmp_path, seed=3, whatif="no_allocator", **SMALL["straggler"])
    for f in sorted(fixed.glob("rank*.pt.trace.json.gz")):
        assert gzip.decompress(f.read_bytes()) == gzip.decompress((truths["straggler"] / f.name).read_bytes())


def test_unknown_whatif_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GpuprofError, match="unknown what-if"):
        generate("healthy", tmp_path / "out", whatif="faster")
    assert not (tmp_path / "out").exists()
