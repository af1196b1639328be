"""When gpuprof run asks for a window and which windows keep their traces
(gpuprof/record/windowplan.py), and the slowest rank from the step clock (rankclock.py)."""

from __future__ import annotations

import math

import pytest

from gpuprof.record.changepoint import Change
from gpuprof.record.rankclock import slowest_rank
from gpuprof.record.windowplan import (
    KeptWindow,
    WindowOptions,
    WindowPlanner,
    lead_steps,
    parse_duration_s,
    parse_every,
    to_prune,
)
from gpuprof.session.windows import Demand

CHANGE = Change(step=100, detected_step=103, before_s=0.1, after_s=0.131)


def planner(**kw: object) -> WindowPlanner:
    return WindowPlanner(WindowOptions(**kw), start_s=0.0, busy_until_step=11)  # type: ignore[arg-type]


def test_parse_every_and_durations() -> None:
    assert parse_every("500") == (500, None)
    assert parse_every("10m") == (None, 600.0)
    assert parse_duration_s("1.5h") == 5400.0 and parse_duration_s("90s") == 90.0 and parse_duration_s("2d") == 172800.0
    for bad in ("0", "10 minutes", "-5m", "m", "0s"):
        with pytest.raises(ValueError):
            parse_every(bad)


def test_lead_covers_a_second_of_steps_and_the_warmup() -> None:
    assert lead_steps(0.01, warmup=2) == 2 + 1 + 100
    assert lead_steps(5.0, warmup=2) == 2 + 1 + 2  # never fewer than two steps
    assert lead_steps(None, warmup=0) == 1 + 10


def test_nothing_while_the_first_window_records() -> None:
    p = planner(every_steps=5)
    assert p.tick(1.0, 1.0, 10, 0.5, CHANGE, [Demand("d", 0.0)]) is None  # busy until step 11 (+ export)
    assert p.tick(1.5, 1.5, 13, 0.5) is not None


def test_a_change_asks_for_a_window_soon_and_once_per_gap() -> None:
    p = planner(trigger_gap_s=60.0)
    req = p.tick(10.0, 1e9, 200, 0.1, CHANGE)
    assert req is not None and req.reason == "change" and req.window == 1
    assert req.start_step == 200 + lead_steps(0.1, 2) and req.warmup == 2 and req.active == 3
    assert req.change is not None and req.change["step"] == 100 and "rose 31 % from step 100" in req.detail
    assert p.tick(11.0, 1e9, 205, 0.1, CHANGE) is None  # one window at a time
    late = req.last_step + 2
    assert p.tick(30.0, 1e9, late, 0.1, CHANGE) is None  # inside the gap
    again = p.tick(71.0, 1e9, late + 100, 0.1, CHANGE)
    assert again is not None and again.window == 2


def test_demands_come_first_and_at_step_is_kept_when_it_can_be() -> None:
    p = planner(every_steps=1000, trigger_gap_s=0.0)
    req = p.tick(1.0, 1e9, 100, 0.1, CHANGE, [Demand("a", 5.0, at_step=150), Demand("b", 6.0)])
    assert req is not None and req.reason == "demand" and req.demand == "a" and req.start_step == 150
    p2 = planner()
    late = p2.tick(1.0, 1e9, 100, 0.1, None, [Demand("a", 5.0, at_step=101)])
    assert late is not None and late.start_step == 100 + lead_steps(0.1, 2) and "step 101 had passed" in late.detail


def test_only_a_demand_while_a_window_waits_for_its_diagnosis() -> None:
    p = planner(every_steps=20, trigger_gap_s=0.0)
    assert p.tick(1.0, 1e9, 100, 0.1, CHANGE, ready=False) is None
    req = p.tick(1.0, 1e9, 100, 0.1, CHANGE, [Demand("d", 1.0)], ready=False)
    assert req is not None and req.reason == "demand"


def test_every_n_steps_starts_on_the_multiples_of_n() -> None:
    p = planner(every_steps=1000)
    step_s = 0.01  # the lead is 103 steps
    assert p.tick(1.0, 1e9, 500, step_s) is None
    req = p.tick(2.0, 1e9, 850, step_s)  # 850 + 103 + 100 (one tick early) reaches 1000
    assert req is not None and req.start_step == 1000 and req.reason == "every" and req.detail == "every 1000 steps"
    assert p.tick(3.0, 1e9, 1010, step_s) is None
    nxt = p.tick(4.0, 1e9, 1850, step_s)
    assert nxt is not None and nxt.start_step == 2000
    # Too late for a multiple (the job stalled the controller): the soonest step, and the
    # schedule goes on from the next multiple.
    q = planner(every_steps=100)
    miss = q.tick(1.0, 1e9, 99, 0.5)
    assert miss is not None and miss.start_step == 99 + lead_steps(0.5, 2)
    assert q.next_every_step is not None and q.next_every_step > miss.last_step and q.next_every_step % 100 == 0


def test_every_duration_follows_the_clock() -> None:
    p = planner(every_s=600.0)
    assert p.tick(599.0, 1e9, 5000, 0.1) is None
    req = p.tick(601.0, 1e9, 6000, 0.1)
    assert req is not None and req.detail == "every 10m" and req.start_step == 6000 + lead_steps(0.1, 2)
    assert p.tick(1300.0, 1e9, 20000, 0.1) is not None  # the next period
    assert p.next_every_s == 1800.0


def test_pruning_keeps_the_latest_k_and_the_worst() -> None:
    ws = [KeptWindow(n, done=True, pruned=False, step_us=us) for n, us in
          [(1, 10.0), (2, 50.0), (3, 11.0), (4, 12.0), (5, 13.0)]]
    assert to_prune(ws, keep=2) == [1, 3]  # 4 and 5 are the latest, 2 the worst
    assert to_prune(ws, keep=0) == [1, 3, 4, 5]
    waiting = [*ws[:4], KeptWindow(5, done=False, pruned=False, step_us=None)]
    assert to_prune(waiting, keep=1) == [1, 3]  # a window not yet diagnosed is never pruned
    assert to_prune([KeptWindow(1, True, True, 99.0), KeptWindow(2, True, False, 1.0)], keep=0) == []


def _clock(slow_rank: int | None, steps: int = 60, excess_s: float = 0.05) -> dict[int, dict[int, float]]:
    out: dict[int, dict[int, float]] = {}
    for r in range(4):
        out[r] = {}
        for s in range(1, steps + 1):
            jitter = 0.001 * math.sin(s * (r + 1))
            out[r][s] = 0.01 + jitter + (excess_s if r == slow_rank else 0.0)
    return out


def test_the_consistently_slowest_rank_is_named_with_its_excess() -> None:
    slow = slowest_rank(_clock(2), {s: 0.1 for s in range(1, 61)})
    assert slow is not None and slow.rank == 2 and slow.slowest_pct == 100.0
    assert slow.excess_s == pytest.approx(0.05, abs=0.002) and slow.steps == 60 and slow.step_s == 0.1


def test_no_rank_is_named_when_none_is_consistently_last_or_the_margin_is_small() -> None:
    assert slowest_rank(_clock(None), {s: 0.1 for s in range(1, 61)}) is None  # the jitter takes turns
    assert slowest_rank(_clock(2, excess_s=0.003), {s: 0.1 for s in range(1, 61)}) is None  # under 5 % of a step
    assert slowest_rank(_clock(2, steps=5)) is None  # too few steps
    assert slowest_rank({0: {1: 1.0}}) is None  # one rank
