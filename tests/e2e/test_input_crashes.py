"""Inputs that used to end in a traceback or a broken report: each one now analyzes, or
exits 2 with one line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clirun import run_cli


def pipeline_timeline(stages: int = 4, steps: int = 3, dur_us: float = 100.0) -> list[dict[str, Any]]:
    """A Megatron-style op timeline: one worker per pipeline stage, 2 microbatches a step."""
    events: list[dict[str, Any]] = []
    ops = (
        ("forward-recv", 0, 1),
        ("forward-compute", 20, 0),
        ("forward-send", 120, 1),
        ("backward-recv", 400, 1),
        ("backward-compute", 420, 0),
        ("backward-send", 620, 1),
    )
    for pp in range(stages):
        for kind, lane in (("compute", 0), ("pp-comm", 1)):
            name = f"PP rank {pp}, TP rank 0, {kind}"
            events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": 10 * pp + lane, "args": {"name": name}})
        for step in range(1, steps + 1):
            for mb in range(2):
                t0 = 10_000 * step + 1_000 * mb + 200 * pp
                for name, offset, lane in ops:
                    events.append(
                        {
                            "name": name,
                            "cat": name,
                            "ph": "X",
                            "pid": 0,
                            "tid": 10 * pp + lane,
                            "ts": t0 + offset,
                            "dur": dur_us,
                            "args": {"step": step, "mb_id": mb},
                        }
                    )
    return events


def test_a_timeline_worker_with_one_activity_is_analyzed(write_trace: Any) -> None:
    # An event without "pid" is a worker of its own with one op (barrier_waits indexed past it).
    events = pipeline_timeline()
    stray = {"name": "forward-compute", "ph": "X", "tid": 0, "ts": 10_020.0, "dur": 50.0, "args": {"step": 1}}
    events.append(stray)
    result = run_cli("analyze", str(write_trace("timeline.json", events)), "--format", "json")
    assert result.traceback is None, result.traceback
    assert result.code == 0, result.stderr
    assert '"rank": 4' in result.stdout  # the stray worker is there, as a fifth rank


def test_a_timeline_whose_ops_all_last_zero_is_analyzed(write_trace: Any) -> None:
    # Every per-microbatch time is 0, so the modelled pipeline span was a division by zero.
    result = run_cli("analyze", str(write_trace("timeline.json", pipeline_timeline(dur_us=0))), "--format", "json")
    assert result.traceback is None, result.traceback
    assert result.code == 0, result.stderr
    assert '"modelled_bubble_fraction"' not in result.stdout


def test_a_step_that_ends_after_the_last_one_keeps_the_partition(write_trace: Any) -> None:
    # Non-consecutive steps end at their last op; one op of step 2 with a damaged timestamp
    # made step 2 outlast step 14, and the window's bounds (first start, last step's end)
    # no longer held its spans: window_us 4,981,220 us against 23,440 us of compute + lost.
    events = pipeline_timeline(steps=4)
    for e in events:
        if e["ph"] == "X" and e["args"]["step"] >= 3:
            e["args"]["step"] += 10
    far = next(e for e in events if e["ph"] == "X" and e["tid"] == 30 and e["args"]["step"] == 2)
    far["ts"] = 5_000_000.0
    result = run_cli("analyze", str(write_trace("timeline.json", events)), "--format", "json")
    assert result.code == 0, result.stderr
    ranks = json.loads(result.stdout)["ranks"]
    assert len(ranks) == 4
    for r in ranks:
        assert abs(r["compute_us"] + sum(r["lost_us"].values()) - r["window_us"]) <= 1e-3 * r["window_us"], r
    assert max(r["window_us"] for r in ranks) > 4_000_000  # the damaged step is in the window, as the trace says


@pytest.mark.parametrize("pg_config", [1.5, 7, True, "abc", {"pg_name": "0"}])
def test_a_pg_config_that_is_not_a_list_is_no_process_groups(write_trace: Any, kineto: Any, event: Any, pg_config: Any) -> None:
    events = [
        event("kernel", "sm90_xmma_gemm_bf16", 0, 500, pid=0, tid=7, stream=7),
        event("kernel", "sm90_xmma_gemm_bf16", 600, 500, pid=0, tid=7, stream=7),
    ]
    doc = kineto(events, rank=0, world_size=2)
    doc["distributedInfo"]["pg_config"] = pg_config
    result = run_cli("analyze", str(write_trace("rank0.json", doc)), "--format", "json")
    assert result.traceback is None, result.traceback
    assert result.code == 0, result.stderr


def test_a_timeline_whose_every_op_is_dropped_is_nothing_to_analyze(write_trace: Any) -> None:
    # Thread names give the Megatron layout, but no op has a usable time: no worker at all
    # (the layout sizes were a max() over no workers).
    events = pipeline_timeline()
    for e in events:
        if e["ph"] == "X":
            e["ts"] = "not a time"
    result = run_cli("analyze", str(write_trace("timeline.json", events)), "--format", "json")
    assert result.traceback is None, result.traceback
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["ranks"] == []


@pytest.mark.parametrize("pid", ["²", "9" * 5000, "-12", 3.0])
def test_annotate_reads_any_pid_of_the_trace(write_trace: Any, kineto: Any, event: Any, tmp_path: Any, pid: Any) -> None:
    # New tracks get integer pids above the trace's own; a pid string of other digits or
    # past Python's int() digit limit made int() raise.
    events = [
        event("kernel", "sm90_xmma_gemm_bf16", 0, 500, pid=0, tid=7, stream=7),
        event("cuda_runtime", "cudaStreamSynchronize", 500, 400, pid=pid, tid=1),
        event("kernel", "sm90_xmma_gemm_bf16", 1000, 500, pid=0, tid=7, stream=7),
    ]
    out = tmp_path / "annotated.json"
    result = run_cli("annotate", str(write_trace("rank0.json", kineto(events, rank=0))), "-o", str(out))
    assert result.traceback is None, result.traceback
    assert result.code == 0, result.stderr
    added = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("name") == "process_name"]
    assert [e["args"]["name"] for e in added] == ["gpuprof: lost time (rank 0)"]
    assert isinstance(added[0]["pid"], int) and added[0]["pid"] >= 1
