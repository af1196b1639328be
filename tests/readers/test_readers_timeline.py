"""The op-level timeline reader on constructed timelines (answers known by construction)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gpuprof.model.timeline import Category, Kind, RankTrace
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


def _steps_of_one_worker(steps: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """One worker (pid 0, two lanes); each step's ops span 700 us from its start."""
    events = [_thread(0, 0, "PP rank 0, TP rank 0, compute"), _thread(0, 1, "PP rank 0, TP rank 0, pp-comm")]
    for step, base in steps:
        events += [
            _op("forward-compute", 0, 0, base, 100, step, 0),
            _op("forward-send", 0, 1, base + 100, 20, step, 0),
            _op("backward-compute", 0, 0, base + 400, 200, step, 0),
            _op("optimizer", 0, 0, base + 650, 50, step),
        ]
    return events


def test_sampled_steps_on_a_real_clock_end_at_their_last_op_before_a_jump(write_trace: WriteTrace) -> None:
    # Steps 5, 6, then 15: 8 steps of about 1000 us were not recorded between 6 and 15, and
    # the clock shows it (step 15 starts 9000 us after step 6), so the clock is real.
    events = _steps_of_one_worker([(5, 0.0), (6, 1000.0), (15, 10000.0)])
    (t,) = load_file(write_trace("sampled.json", {"traceEvents": events}))
    # Step 5 keeps the real time up to step 6 (300 us no timer covers); step 6 is followed
    # by unrecorded steps, so it ends at its last op; the last step too.
    assert [(s.number, s.start_us, s.end_us) for s in t.steps] == [
        (5, 0.0, 1000.0),
        (6, 1000.0, 1700.0),
        (15, 10000.0, 10700.0),
    ]
    (note,) = [w for w in t.warnings if "non-consecutive" in w]
    assert "step 6, then step 15" in note and "stitched" not in note


def test_stitched_clock_ends_every_step_at_its_last_op(write_trace: WriteTrace) -> None:
    # Steps 5, 6, then 100 only 300 us after 6 ended: 93 steps of 700 us cannot have run
    # in 300 us, so the clock is stitched and even the gap between 5 and 6 is made up.
    events = _steps_of_one_worker([(5, 0.0), (6, 1000.0), (100, 2000.0)])
    (t,) = load_file(write_trace("stitched.json", {"traceEvents": events}))
    assert [(s.number, s.start_us, s.end_us) for s in t.steps] == [
        (5, 0.0, 700.0),
        (6, 1000.0, 1700.0),
        (100, 2000.0, 2700.0),
    ]
    assert sum(s.duration_us for s in t.steps) == 3 * 700.0  # the op spans, no filler
    (note,) = [w for w in t.warnings if "non-consecutive" in w]
    assert "step 6 is followed by step 100" in note and "93 steps between" in note and "stitched" in note


def test_consecutive_steps_give_no_step_warning(write_trace: WriteTrace) -> None:
    traces = load_file(write_trace("timeline.json", {"traceEvents": _megatron_like(pp=2, dp=1)}))
    assert all(not any("non-consecutive" in w for w in t.warnings) for t in traces)


def test_one_step_warning_per_file_even_with_many_workers(write_trace: WriteTrace) -> None:
    events = _megatron_like(pp=2, dp=2)
    for e in events:
        if e["ph"] == "X" and e["args"]["step"] == 6:
            e["args"]["step"] = 9  # 5 then 9, 1000 us apart: steps 6-8 cannot fit
    traces = load_file(write_trace("timeline.json", {"traceEvents": events}))
    assert len(traces) == 4
    for t in traces:
        assert sum("non-consecutive" in w for w in t.warnings) == 1
        assert t.steps[0].end_us == 750.0  # step 5's last op (the optimizer) ends at 750


# Begin/end (B/E) pairs: the same ops as X events; unmatched halves dropped with a warning.
def _as_begin_end(events: list[dict[str, Any]], args_on_end: bool = False) -> list[dict[str, Any]]:
    """The same timeline with each ``X`` event written as a ``B`` and a nameless ``E``, in
    time order (at one instant: ends before begins, inner ends before outer ones, outer
    begins before inner ones). With ``args_on_end`` the ``mb_id`` moves to the ``E``."""
    keyed: list[tuple[tuple[float, int, float, int], dict[str, Any]]] = []
    other = [e for e in events if e["ph"] != "X"]
    for i, e in enumerate(e for e in events if e["ph"] == "X"):
        b_args, e_args = dict(e["args"]), {}
        if args_on_end and "mb_id" in b_args:
            e_args = {"mb_id": b_args.pop("mb_id")}
        begin = {k: v for k, v in e.items() if k != "dur"} | {"ph": "B", "args": b_args}
        end = {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"], "args": e_args}
        keyed.append(((e["ts"], 1, -e["dur"], i), begin))
        keyed.append(((e["ts"] + e["dur"], 0, 0.0, -i), end))
    keyed.sort(key=lambda k: k[0])
    return other + [e for _, e in keyed]


def _assert_same(a: list[RankTrace], b: list[RankTrace]) -> None:
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        assert (x.rank, x.world_size, x.parallel, x.fmt, x.warnings) == (
            y.rank,
            y.world_size,
            y.parallel,
            y.fmt,
            y.warnings,
        )
        pd.testing.assert_frame_equal(x.device, y.device)
        pd.testing.assert_frame_equal(x.host, y.host)
        assert x.steps == y.steps


@pytest.mark.parametrize("args_on_end", [False, True])
def test_begin_end_reads_as_complete_events(write_trace: WriteTrace, args_on_end: bool) -> None:
    events = _megatron_like(pp=2, dp=2)
    xs = load_file(write_trace("x/timeline.json", {"traceEvents": events}))
    be = load_file(write_trace("be/timeline.json", {"traceEvents": _as_begin_end(events, args_on_end)}))
    assert len(xs) == 4
    _assert_same(xs, be)


def test_nested_begin_end_pairs(write_trace: WriteTrace) -> None:
    # One thread: outer and first inner op start together; the innermost ends with its parent.
    events = [
        _thread(0, 0, "PP rank 0, TP rank 0, compute"),
        _op("train-step", 0, 0, 0.0, 1000.0, 5),
        _op("forward-compute", 0, 0, 0.0, 300.0, 5, 0),
        _op("backward-compute", 0, 0, 300.0, 600.0, 5, 0),
        _op("grads-reduce-scatter", 0, 0, 800.0, 100.0, 5),
        _op("optimizer", 0, 0, 1000.0, 50.0, 6),
    ]
    be = _as_begin_end(events)
    assert [e["ph"] for e in be[1:]] == ["B", "B", "E", "B", "B", "E", "E", "E", "B", "E"]
    (t,) = load_file(write_trace("be.json", be))
    got = [(str(n), s, e) for n, s, e in zip(t.device["name"], t.device["start_us"], t.device["end_us"])]
    assert got == [
        ("train-step", 0.0, 1000.0),
        ("forward-compute", 0.0, 300.0),
        ("backward-compute", 300.0, 900.0),
        ("grads-reduce-scatter", 800.0, 900.0),
        ("optimizer", 1000.0, 1050.0),
    ]
    (x,) = load_file(write_trace("x.json", events))
    _assert_same([x], [t])


def test_end_args_override_and_threads_pair_separately(write_trace: WriteTrace) -> None:
    events = [
        {"ph": "B", "name": "forward-compute", "pid": 0, "tid": 1, "ts": 0, "args": {"step": 3, "mb_id": 0}},
        {"ph": "B", "name": "forward-send", "pid": 0, "tid": 2, "ts": 5, "args": {"step": 3}},
        # Ends the B of thread 1, not the later B of thread 2; its name is wrong but ignored.
        {"ph": "E", "name": "whatever", "pid": 0, "tid": 1, "ts": 40, "args": {"mb_id": 7}},
        {"ph": "E", "pid": 0, "tid": 2, "ts": 60},
    ]
    (t,) = load_file(write_trace("t.json", events))
    rows = sorted(
        zip(
            t.device["name"].astype(str),
            t.device["start_us"],
            t.device["end_us"],
            t.device["mb_id"],
            t.device["step"],
        )
    )
    assert rows == [("forward-compute", 0.0, 40.0, 7, 3), ("forward-send", 5.0, 60.0, -1, 3)]
    assert not [w for w in t.warnings if "'B'" in w or "'E'" in w]


def test_unmatched_begin_and_end_are_dropped_with_warnings(write_trace: WriteTrace) -> None:
    events = [
        {"ph": "E", "pid": 0, "tid": 0, "ts": 1},  # nothing open
        {"ph": "B", "name": "forward-compute", "pid": 0, "tid": 0, "ts": 10, "args": {"step": 1}},
        {"ph": "E", "pid": 0, "tid": 0, "ts": 20},
        {"ph": "E", "pid": 0, "tid": 0, "ts": 25},  # nothing open any more
        {"ph": "B", "name": "backward-compute", "pid": 0, "tid": 0, "ts": 30, "args": {"step": 1}},
        {"ph": "B", "name": "grads-reduce-scatter", "pid": 0, "tid": 0, "ts": 35, "args": {"step": 1}},
        # The job was killed: neither B above ends.
    ]
    (t,) = load_file(write_trace("killed.json", events))
    assert [
        (str(n), s, e) for n, s, e in zip(t.device["name"], t.device["start_us"], t.device["end_us"])
    ] == [("forward-compute", 10.0, 20.0)]
    begin = [w for w in t.warnings if "begin ('B')" in w]
    end = [w for w in t.warnings if "end ('E')" in w]
    assert len(begin) == 1 and begin[0].startswith("2 ") and "'backward-compute'" in begin[0]
    assert len(end) == 1 and end[0].startswith("2 ")
