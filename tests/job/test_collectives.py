"""Matching collectives across ranks, clock alignment and straggler waits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.collectives import match_collectives, per_rank_waits, wait_claims
from gpuprof.model import intervals as iv
from gpuprof.model.classify import classify
from gpuprof.model.timeline import (
    DEVICE_COLUMNS,
    Category,
    Kind,
    ProcessGroup,
    RankTrace,
    Step,
    empty_host_table,
    make_table,
)
from gpuprof.readers.optimeline import TIMELINE_HOLDS

SLOW = {0: 20_000.0, 1: 20_000.0, 2: 25_000.0, 3: 20_000.0}
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "ampere_sgemm_128x64_tn"


def allreduce_job(
    compute_us: dict[int, float],
    rounds: int = 10,
    skew_us: dict[int, float] | None = None,
    world_size: int | None = None,
    transfer_us: float = 1000.0,
) -> list[RankTrace]:
    """Ranks that compute ``compute_us[rank]`` then all-reduce, ``rounds`` times.

    Every all-reduce ends on all ranks when the slowest has arrived plus ``transfer_us``:
    rank r waits ``max(compute) - compute[r]`` in each, by construction. Each round is a
    step. ``skew_us[rank]`` shifts that rank's whole clock (a different host).
    """
    skew_us = skew_us or {}
    slowest = max(compute_us.values())
    period = slowest + transfer_us + 500.0
    ranks = sorted(compute_us)
    traces = []
    for r in ranks:
        off = skew_us.get(r, 0.0)
        start, end, kind, name, coll, pg = [], [], [], [], [], []
        steps = []
        for c in range(rounds):
            base = c * period + off
            start += [base, base + compute_us[r]]
            end += [base + compute_us[r], base + slowest + transfer_us]
            kind += [int(Kind.KERNEL)] * 2
            name += [GEMM, ALLREDUCE]
            coll += ["", "allreduce"]
            pg += ["", "0"]
            steps.append(Step(c, base, base + period))
        cols = {
            "start_us": start,
            "end_us": end,
            "kind": kind,
            "category": [int(classify(Kind.KERNEL, n)) for n in name],
            "name": name,
            "coll_name": coll,
            "pg": pg,
        }
        traces.append(
            RankTrace(
                rank=r,
                source=f"rank{r}.json",
                fmt="kineto",
                device=make_table(cols, DEVICE_COLUMNS),
                host=empty_host_table(),
                steps=tuple(steps),
                world_size=world_size or len(ranks),
                process_groups=(ProcessGroup("0", "default_pg", tuple(range(world_size or len(ranks)))),),
            )
        )
    return traces


def arrivals_job(
    arrive_us: dict[int, list[float]],
    steps: int = 1,
    transfer_us: float = 200.0,
    msg_bytes: int = -1,
    coll: str = "allreduce",
    kernel: str = ALLREDUCE,
    world_size: int | None = None,
    step_start_us: dict[int, float] | None = None,
    device: str | None = None,
) -> list[RankTrace]:
    """Each step, rank r computes until ``arrive_us[r][k]`` (after the step start), then
    runs collective k, which ends on every rank ``transfer_us`` after the last arrival.

    Rank r starts each step at ``step_start_us[r]`` (default 0) after the step's start,
    computing from then on. Steps follow each other with no gap.
    """
    ranks = sorted(arrive_us)
    n_coll = len(arrive_us[ranks[0]])
    ends = [max(arrive_us[r][k] for r in ranks) + transfer_us for k in range(n_coll)]
    period = ends[-1] + 100.0
    step_start_us = step_start_us or {}
    traces = []
    for r in ranks:
        start, end, kind, name, colls, pg, nbytes = [], [], [], [], [], [], []
        step_list = []
        for st in range(steps):
            base = st * period
            prev = base + step_start_us.get(r, 0.0)
            for k in range(n_coll):
                a = base + arrive_us[r][k]
                if a > prev:
                    start.append(prev)
                    end.append(a)
                    kind.append(int(Kind.KERNEL))
                    name.append(GEMM)
                    colls.append("")
                    pg.append("")
                    nbytes.append(-1)
                start.append(a)
                end.append(base + ends[k])
                kind.append(int(Kind.KERNEL))
                name.append(kernel)
                colls.append(coll)
                pg.append("0")
                nbytes.append(msg_bytes)
                prev = base + ends[k]
            start.append(prev)
            end.append(base + period - 10.0)
            kind.append(int(Kind.KERNEL))
            name.append(GEMM)
            colls.append("")
            pg.append("")
            nbytes.append(-1)
            step_list.append(Step(st, base + step_start_us.get(r, 0.0), base + period))
        cols = {
            "start_us": start,
            "end_us": end,
            "kind": kind,
            "category": [int(classify(Kind.KERNEL, n)) for n in name],
            "name": name,
            "coll_name": colls,
            "pg": pg,
            "bytes": nbytes,
        }
        n = world_size or len(ranks)
        traces.append(
            RankTrace(
                rank=r,
                source=f"rank{r}.json",
                fmt="kineto",
                device=make_table(cols, DEVICE_COLUMNS),
                host=empty_host_table(),
                steps=tuple(step_list),
                device_name=device,
                world_size=n,
                process_groups=(ProcessGroup("0", "default_pg", tuple(range(n))),),
            )
        )
    return traces


def summaries(traces: list[RankTrace]) -> list[RankSummary]:
    return [summarize(t) for t in traces]


def test_late_rank_makes_every_other_rank_wait_by_its_lateness() -> None:
    job = summaries(allreduce_job({0: 20_000.0, 1: 20_000.0, 2: 25_000.0, 3: 20_000.0}))
    m = match_collectives(job)
    waits = per_rank_waits(m)
    assert list(waits["calls"]) == [10, 10, 10, 10]
    for r in (0, 1, 3):
        assert waits.loc[r, "wait_us"] == pytest.approx(10 * 5_000.0)
    assert waits.loc[2, "wait_us"] == pytest.approx(0.0)
    assert int(waits.loc[2, "last_calls"]) == 10
    claims = wait_claims(m)
    assert 2 not in claims
    # Claims start where the waiting rank's all-reduce starts (its own clock).
    first = job[0].comms.sort_values("start_us").iloc[0]
    assert claims[0][0][0] == pytest.approx(first["start_us"])
    assert iv.total(claims[0]) == pytest.approx(50_000.0)


def test_clock_skew_of_one_second_does_not_change_the_answer() -> None:
    plain = match_collectives(summaries(allreduce_job({0: 20_000.0, 1: 20_000.0, 2: 25_000.0, 3: 20_000.0})))
    skewed = match_collectives(
        summaries(
            allreduce_job({0: 20_000.0, 1: 20_000.0, 2: 25_000.0, 3: 20_000.0}, skew_us={1: 1_000_000.0})
        )
    )
    a = per_rank_waits(plain)["wait_us"]
    b = per_rank_waits(skewed)["wait_us"]
    assert np.allclose(a.to_numpy(), b.to_numpy())
    # The skewed rank's offset is found, relative to the others.
    offs = skewed.offsets_us
    assert offs[1] - offs[0] == pytest.approx(1_000_000.0)
    # Its claims stay on its own clock.
    c1 = wait_claims(skewed)[1]
    assert c1[0][0] >= 1_000_000.0


def test_skew_on_the_late_rank_itself_is_not_mistaken_for_lateness() -> None:
    job = allreduce_job({0: 20_000.0, 1: 20_000.0, 2: 25_000.0, 3: 20_000.0}, skew_us={2: -3_000_000.0})
    waits = per_rank_waits(match_collectives(summaries(job)))
    assert waits.loc[2, "wait_us"] == pytest.approx(0.0)
    assert waits.loc[0, "wait_us"] == pytest.approx(50_000.0)


def test_partial_group_measures_lower_bounds_and_marks_the_group_incomplete() -> None:
    job = summaries(allreduce_job({0: 20_000.0, 1: 22_000.0}, world_size=8))
    m = match_collectives(job)
    assert m.incomplete_groups == {"0": (2, 8)}
    assert not m.calls["complete"].any()
    assert per_rank_waits(m).loc[0, "wait_us"] == pytest.approx(10 * 2_000.0)


def test_single_rank_has_nothing_to_wait_for() -> None:
    job = summaries(allreduce_job({0: 20_000.0}, world_size=2))
    m = match_collectives(job)
    assert wait_claims(m) == {}
    assert (m.calls["wait_us"] == 0).all()


def test_hta_sampled_ranks_match_although_they_interleave_groups_differently(shared_traces: Path) -> None:
    # In step 552 rank 1 issues an all-reduce before its second all-to-all, rank 0 after:
    # matching by (group, name, order) pairs every call; by order alone it would not.
    from gpuprof.readers import load_all

    job = [summarize(t) for t in load_all([shared_traces / "hta-sampled-2rank"])]
    m = match_collectives(job)
    assert m.unmatched == 0
    assert m.calls.groupby(["pg", "coll_name", "step", "k"])["rank"].nunique().eq(2).all()
    # 2 of 128 ranks: the group is incomplete and said to be.
    assert m.incomplete_groups == {"": (2, 128)}


def test_dlrm_all_ranks_match_and_the_last_arriver_waits_least(shared_traces: Path) -> None:
    from gpuprof.readers import load_all

    job = [summarize(t) for t in load_all([shared_traces / "dlrm-8rank"])]
    m = match_collectives(job)
    assert m.unmatched == 0 and not m.incomplete_groups
    assert m.calls["complete"].all()
    waits = per_rank_waits(m)
    # The 8 ranks ran on one host: aligned clocks barely move.
    assert max(abs(v) for v in m.offsets_us.values()) < 100.0
    last = int(waits["last_calls"].idxmax())
    # The rank that most often arrives last waits least; everyone else waits longer.
    assert waits["wait_us"].idxmin() == last
    assert (waits.drop(index=last)["wait_us"] > 2 * waits.loc[last, "wait_us"]).all()
    # A wait never exceeds the collective it is inside.
    assert (m.calls["wait_us"] <= m.calls["duration_us"] + 1e-6).all()


def timeline_barrier_job(before_us: dict[int, float], steps: int = 3) -> list[RankTrace]:
    """Workers compute ``before_us[rank]``, then all start ``optimizer`` at one instant."""
    barrier = max(before_us.values()) + 100.0
    traces = []
    for r, busy in before_us.items():
        start, end, name, step = [], [], [], []
        step_list = []
        for s in range(steps):
            base = s * 10_000.0
            start += [base, base + barrier]
            end += [base + busy, base + barrier + 500.0]
            name += ["forward-compute", "optimizer"]
            step += [s, s]
            step_list.append(Step(s, base, base + 10_000.0))
        cols = {
            "start_us": start,
            "end_us": end,
            "kind": [int(Kind.TIMER)] * len(start),
            "category": [int(classify(Kind.TIMER, n)) for n in name],
            "name": name,
            "step": step,
        }
        traces.append(
            RankTrace(
                rank=r,
                source="timeline.json",
                fmt="timeline",
                holds=TIMELINE_HOLDS,
                device=make_table(cols, DEVICE_COLUMNS),
                host=empty_host_table(),
                steps=tuple(step_list),
            )
        )
    return traces


def timeline_late_comm_job(comm_us: dict[int, list[float]], ranks: int = 4) -> list[RankTrace]:
    """Workers compute 1 ms, then the ranks in ``comm_us`` run an
    ``embedding-grads-all-reduce`` of ``comm_us[rank][step]``; then all start
    ``optimizer`` at one instant (the barrier), 100 us after the last one is done."""
    steps = len(next(iter(comm_us.values())))
    barrier = [1_000.0 + max(v[s] for v in comm_us.values()) + 100.0 for s in range(steps)]
    period = max(barrier) + 1_000.0
    traces = []
    for r in range(ranks):
        start, end, name, step = [], [], [], []
        step_list = []
        for s in range(steps):
            base = s * period
            start += [base, base + barrier[s]]
            end += [base + 1_000.0, base + barrier[s] + 500.0]
            name += ["forward-compute", "optimizer"]
            step += [s, s]
            if r in comm_us:
                start.append(base + 1_000.0)
                end.append(base + 1_000.0 + comm_us[r][s])
                name.append("embedding-grads-all-reduce")
                step.append(s)
            step_list.append(Step(s, base, base + period))
        cols = {
            "start_us": start,
            "end_us": end,
            "kind": [int(Kind.TIMER)] * len(start),
            "category": [int(classify(Kind.TIMER, n)) for n in name],
            "name": name,
            "step": step,
        }
        traces.append(
            RankTrace(
                rank=r,
                source="timeline.json",
                fmt="timeline",
                holds=TIMELINE_HOLDS,
                device=make_table(cols, DEVICE_COLUMNS),
                host=empty_host_table(),
                steps=tuple(step_list),
            )
        )
    return traces


def test_barrier_before_a_timer_op_is_found_and_its_waits_measured() -> None:
    from gpuprof.job.barriers import barrier_waits

    job = summaries(timeline_barrier_job({0: 1_000.0, 1: 3_000.0, 2: 1_000.0}))
    b = barrier_waits(job, {r: 0.0 for r in range(3)})
    assert b is not None
    assert b.points == 3
    assert b.wait_us == {0: pytest.approx(6_000.0), 1: 0.0, 2: pytest.approx(6_000.0)}
    assert b.last == {0: 0, 1: 3, 2: 0}
    assert b.last_activity == {"compute": 3}
    assert 1 not in b.claims
    assert list(b.claims[0][0]) == [1_000.0, 11_000.0, 21_000.0]
    assert list(b.claims[0][1]) == [3_000.0, 13_000.0, 23_000.0]


def test_no_barrier_without_a_shared_start_or_outside_timelines() -> None:
    from dataclasses import replace

    from gpuprof.job.barriers import barrier_waits

    traces = timeline_barrier_job({0: 1_000.0, 1: 3_000.0, 2: 1_000.0})
    # Shift one worker's optimizer by 1 ms: no instant is shared by all.
    dev = traces[2].device.copy()
    opt = dev["name"].astype(str) == "optimizer"
    dev.loc[opt, "start_us"] += 1_000.0
    dev.loc[opt, "end_us"] += 1_000.0
    shifted = traces[:2] + [replace(traces[2], device=dev)]
    assert barrier_waits(summaries(shifted), {r: 0.0 for r in range(3)}) is None
    assert barrier_waits(summaries(traces[:2]), {0: 0.0, 1: 0.0}) is None  # fewer than 3 ranks
    kineto = summaries(allreduce_job({0: 1.0, 1: 1.0, 2: 1.0}))
    assert barrier_waits(kineto, {r: 0.0 for r in range(3)}) is None


def test_wait_hidden_by_compute_on_another_stream_is_not_exposed() -> None:
    from dataclasses import replace

    import pandas as pd

    from gpuprof.job.cross_rank import analyze_job

    traces = []
    for t in allreduce_job(SLOW):
        dev = t.device
        coll = dev.loc[dev["category"] == int(Category.COLLECTIVE)]
        # Compute on another stream covers each all-reduce entirely.
        extra = make_table(
            {
                "start_us": coll["start_us"].to_numpy(),
                "end_us": coll["end_us"].to_numpy(),
                "kind": [int(Kind.KERNEL)] * len(coll),
                "category": [int(Category.COMPUTE)] * len(coll),
                "name": [GEMM] * len(coll),
                "stream": [9] * len(coll),
            },
            DEVICE_COLUMNS,
        )
        both = pd.concat(
            [
                dev.astype({"name": str, "coll_name": str, "pg": str}),
                extra.astype({"name": str, "coll_name": str, "pg": str}),
            ]
        )
        traces.append(
            replace(t, device=make_table({c: both[c].to_numpy() for c in DEVICE_COLUMNS}, DEVICE_COLUMNS))
        )
    job = summaries(traces)
    waits = per_rank_waits(match_collectives(job))
    assert waits.loc[0, "wait_us"] == pytest.approx(50_000.0)
    assert waits.loc[0, "exposed_wait_us"] == pytest.approx(0.0)
    assert analyze_job(job).findings.to_dict()["stragglers"] == []
