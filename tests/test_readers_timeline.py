"""The op-level timeline reader on constructed timelines (answers known by construction)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuprof.model.timeline import Category, Kind
from gpuprof.readers import load_file
from gpuprof.readers.optimeline import read_meta_sizes

WriteTrace = Callable[..., Path]


def _op(
    name: str, pid: int | str, tid: int, ts: float, dur: float, step: int, mb: int = -1
) -> dict[str, Any]:
    return {
        "name": name,
        "cat": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "ph": "X",
        "args": {"step": step, "mb_id": mb},
    }


def _thread(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "pid": pid, "tid": tid, "ph": "M", "args": {"name": name}}


def _megatron_like(pp: int, dp: int) -> list[dict[str, Any]]:
    """pp x dp workers (tp 1); each has a compute and a pp-comm thread, two steps."""
    events: list[dict[str, Any]] = []
    tid = 0
    for p in range(pp):
        for d in range(dp):
            compute, comm = tid, tid + 1
            tid += 2
            events += [
                _thread(d, compute, f"PP rank {p}, TP rank 0, compute"),
                _thread(d, comm, f"PP rank {p}, TP rank 0, pp-comm"),
            ]
            for step, base in ((5, 0.0), (6, 1000.0)):
                events += [
                    _op("forward-compute", d, compute, base + 10 * p, 100, step, 0),
                    _op("forward-send", d, comm, base + 10 * p + 100, 20, step, 0),
                    _op("backward-recv", d, comm, base + 300, 50, step, 0),
                    _op("backward-compute", d, compute, base + 400, 200, step, 0),
                    _op("optimizer", d, compute, base + 700, 50, step),
                ]
    return events


def test_workers_from_thread_names_without_meta(write_trace: WriteTrace) -> None:
    traces = load_file(write_trace("timeline.json", {"traceEvents": _megatron_like(pp=2, dp=3)}))
    assert len(traces) == 6
    # Sizes inferred from the largest ranks seen; Megatron order: rank = pp * dp_size + dp.
    got = {(t.parallel["pp_rank"], t.parallel["dp_rank"]): t.rank for t in traces}
    assert got == {(p, d): p * 3 + d for p in range(2) for d in range(3)}
    for t in traces:
        assert t.fmt == "timeline" and len(t.host) == 0
        assert (t.parallel["pp_size"], t.parallel["dp_size"], t.parallel["tp_size"]) == (2, 3, 1)
        assert t.world_size == 6
        assert len(t.device) == 10  # 5 ops x 2 steps, both threads of the worker
        assert (t.device["kind"] == int(Kind.TIMER)).all()
        cats = dict(zip(t.device["name"].astype(str), t.device["category"]))
        assert cats == {
            "forward-compute": Category.COMPUTE,
            "forward-send": Category.P2P,
            "backward-recv": Category.P2P,
            "backward-compute": Category.COMPUTE,
            "optimizer": Category.COMPUTE,
        }
        assert sorted(set(t.device["mb_id"])) == [-1, 0]
        p = t.parallel["pp_rank"]
        # Step 5 runs from its first op to the first op of step 6; step 6 ends at its last op.
        assert [(s.number, s.start_us, s.end_us) for s in t.steps] == [
            (5, 10.0 * p, 1000.0 + 10 * p),
            (6, 1000.0 + 10 * p, 1750.0),
        ]


def test_meta_file_gives_sizes(write_trace: WriteTrace) -> None:
    path = write_trace("run/timeline-X.json", _megatron_like(pp=2, dp=1))
    write_trace("run/meta-X.yaml", "trial_name: X\ndp_size: 4\npp_size: 2\ntp_size: 1\nworld_size: 8\n")
    traces = load_file(path)
    # dp_size 4 from the meta file (not the 1 seen): pp rank 1 starts at rank 4.
    assert sorted(t.rank for t in traces) == [0, 4]
    assert all(t.world_size == 8 and t.parallel["dp_size"] == 4 for t in traces)


def test_meta_parser_takes_only_integer_lines(tmp_path: Path) -> None:
    (tmp_path / "meta-A.yaml").write_text(
        "pp_size: 4\nname: !!python/object/apply:os.system ['echo hi']\n  tp_size: 2  # comment\nbad: 1.5\nlist:\n  - 1\n"
    )
    assert read_meta_sizes(tmp_path / "timeline-A.json") == {"pp_size": 4, "tp_size": 2}
    assert read_meta_sizes(tmp_path / "other" / "x.json") == {}


def test_generic_timeline_has_a_worker_per_process(write_trace: WriteTrace) -> None:
    events = [
        _op("step-compute", pid, tid, 10.0 * i, 5, step=1)
        for pid in (3, 1)
        for tid in (0, 1)
        for i in range(2)
    ]
    traces = load_file(write_trace("plain.json", events))
    assert [(t.rank, len(t.device)) for t in traces] == [(1, 4), (3, 4)]  # rank = pid
    assert all(t.parallel == {} for t in traces)
    assert all(t.steps[0].number == 1 for t in traces)


def test_generic_timeline_without_integer_pids_uses_order(write_trace: WriteTrace) -> None:
    events = [_op("compute", pid, 0, 0, 5, step=-1) for pid in ("b", "a")]
    traces = load_file(write_trace("names.json", events))
    assert [(t.rank, t.steps) for t in traces] == [(0, ()), (1, ())]


def test_structured_timeline_with_an_unnamed_thread_warns(write_trace: WriteTrace) -> None:
    events = _megatron_like(pp=2, dp=1)
    events.append(_op("checkpoint-save", 0, 99, 5000, 10, step=6))  # thread 99 has no name
    traces = load_file(write_trace("mixed.json", events))
    assert len(traces) == 3
    assert len({t.rank for t in traces}) == 3
    assert all(any("without 'PP rank k, TP rank t' names" in w for w in t.warnings) for t in traces)
