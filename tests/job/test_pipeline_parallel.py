"""Pipeline parallelism: stages, microbatches, schedule, and measured vs theoretical bubble.

Constructed pipelines come from a small simulator of GPipe and 1F1B schedules: every
forward/backward start is decided by its data dependencies, so the bubble each stage sits
in is known by construction ((p-1)/(m+p-1) of the span for balanced stages).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.pipeline_parallel import analyze_pipeline, modelled_span_us, theoretical_bubble_fraction
from gpuprof.model import intervals as iv
from gpuprof.model.classify import classify
from gpuprof.model.timeline import DEVICE_COLUMNS, Kind, RankTrace, Step, empty_host_table, make_table
from gpuprof.readers.optimeline import TIMELINE_HOLDS

EPS_US = 50.0  # duration of a send / recv timer op


def _order(schedule: str, stage: int, p: int, m: int) -> list[tuple[str, int]]:
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(p - 1 - stage, m)
    ops = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", i) for i in range(m - warm, m)]


def simulate(
    p: int, m: int, fwd_us: list[float], bwd_us: list[float], schedule: str = "gpipe"
) -> dict[int, list[tuple[str, int, float, float]]]:
    """Per stage, its (kind, microbatch, start_us, end_us) ops under ``schedule``."""
    orders = {k: _order(schedule, k, p, m) for k in range(p)}
    done: dict[tuple[str, int, int], tuple[float, float]] = {}
    free = {k: 0.0 for k in range(p)}
    pos = {k: 0 for k in range(p)}
    while any(pos[k] < len(orders[k]) for k in range(p)):
        progressed = False
        for k in range(p):
            if pos[k] >= len(orders[k]):
                continue
            kind, i = orders[k][pos[k]]
            dep = ("F", k - 1, i) if kind == "F" else (("B", k + 1, i) if k < p - 1 else ("F", k, i))
            if kind == "F" and k == 0:
                ready = 0.0
            elif dep in done:
                ready = done[dep][1]
            else:
                continue
            start = max(free[k], ready)
            end = start + (fwd_us[k] if kind == "F" else bwd_us[k])
            done[(kind, k, i)] = (start, end)
            free[k] = end
            pos[k] += 1
            progressed = True
        assert progressed, "schedule deadlocked"
    return {k: [(kd, i, *done[(kd, k, i)]) for kd, i in orders[k]] for k in range(p)}


def pipeline_job(
    p: int, m: int, fwd_us: list[float], bwd_us: list[float], schedule: str = "gpipe", steps: int = 2
) -> list[RankTrace]:
    """One timeline worker per stage, ``steps`` identical steps of the simulated schedule."""
    ops = simulate(p, m, fwd_us, bwd_us, schedule)
    span = max(e for k in ops for _, _, _, e in ops[k])
    period = span + 10_000.0
    traces = []
    for k in range(p):
        rows: list[tuple[float, float, str, int, int]] = []
        step_list = []
        for s in range(steps):
            base = s * period
            for kind, i, a, b in ops[k]:
                name = "forward-compute" if kind == "F" else "backward-compute"
                rows.append((base + a, base + b, name, i, s))
                if kind == "F" and k < p - 1:
                    rows.append((base + b, base + b + EPS_US, "forward-send", -1, s))
                if kind == "F" and k > 0:
                    arrive = ops[k - 1][[(x, j) for x, j, _, _ in ops[k - 1]].index(("F", i))][3]
                    rows.append((base + arrive - EPS_US, base + arrive, "forward-recv", -1, s))
                if kind == "B" and k > 0:
                    rows.append((base + b, base + b + EPS_US, "backward-send", -1, s))
                if kind == "B" and k < p - 1:
                    arrive = ops[k + 1][[(x, j) for x, j, _, _ in ops[k + 1]].index(("B", i))][3]
                    rows.append((base + arrive - EPS_US, base + arrive, "backward-recv", -1, s))
            rows.append((base + span + 2_000.0, base + span + 5_000.0, "optimizer", -1, s))
            step_list.append(Step(s, base - 500.0, base + period - 500.0))
        rows.sort()
        names = [r[2] for r in rows]
        cols = {
            "start_us": [r[0] for r in rows],
            "end_us": [r[1] for r in rows],
            "kind": [int(Kind.TIMER)] * len(rows),
            "category": [int(classify(Kind.TIMER, n)) for n in names],
            "name": names,
            "mb_id": [r[3] for r in rows],
            "step": [r[4] for r in rows],
        }
        traces.append(
            RankTrace(
                rank=k,
                source="timeline.json",
                fmt="timeline",
                holds=TIMELINE_HOLDS,
                device=make_table(cols, DEVICE_COLUMNS),
                host=empty_host_table(),
                steps=tuple(step_list),
                world_size=p,
                parallel={"pp_rank": k, "pp_size": p, "tp_rank": 0, "dp_rank": 0, "tp_size": 1, "dp_size": 1},
            )
        )
    return traces


def summaries(traces: list[RankTrace]) -> list[RankSummary]:
    return [summarize(t) for t in traces]


def test_theoretical_fraction() -> None:
    assert theoretical_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert theoretical_bubble_fraction(4, 8, chunks=2) == pytest.approx(3 / 19)
    assert theoretical_bubble_fraction(1, 8) == 0.0
    with pytest.raises(ValueError):
        theoretical_bubble_fraction(4, 0)
    # Balanced stages: the modelled span is (m + p - 1) microbatch times.
    assert modelled_span_us([10.0] * 4, 8) == pytest.approx(110.0)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_balanced_pipeline_measures_the_theoretical_bubble(schedule: str) -> None:
    p, m = 4, 8
    job = summaries(pipeline_job(p, m, [10_000.0] * p, [20_000.0] * p, schedule))
    res = analyze_pipeline(job, {s.rank: 0.0 for s in job})
    assert res is not None
    f = res.findings.to_dict()
    assert (f["stages"], f["microbatches"], f["chunks"]) == (4, 8, 1)
    assert f["schedule"] == schedule
    assert f["theoretical_bubble_fraction"] == pytest.approx(3 / 11, abs=1e-4)
    assert f["steps_measured"] == 2
    assert f["span_us"] == pytest.approx((m + p - 1) * 30_000.0, rel=1e-3)
    for row in f["per_stage"]:
        assert row["bubble_fraction"] == pytest.approx(3 / 11, abs=0.01)
        assert row["compute_per_microbatch_us"] == pytest.approx(30_000.0)
    assert res.stage_of == {0: 0, 1: 1, 2: 2, 3: 3}
    # The optimizer after the span is not bubble.
    for s in job:
        assert res.claims[s.rank][1].max() <= s.steps[-1].end_us


def test_slow_stage_inflates_the_bubble_of_the_others() -> None:
    p, m = 4, 8
    fwd = [10_000.0, 10_000.0, 20_000.0, 10_000.0]
    bwd = [20_000.0, 20_000.0, 40_000.0, 20_000.0]
    job = summaries(pipeline_job(p, m, fwd, bwd, "1f1b"))
    res = analyze_pipeline(job, {s.rank: 0.0 for s in job})
    assert res is not None
    f = res.findings.to_dict()
    assert f["slowest_stage"] == 2
    assert f["slowest_stage_ranks"] == [2]
    assert f["slowest_stage_ratio"] == pytest.approx(2.0)
    theory = f["theoretical_bubble_fraction"]
    by_stage = {r["stage"]: r for r in f["per_stage"]}
    for k in (0, 1, 3):
        assert by_stage[k]["bubble_fraction"] > theory + 0.1
        assert by_stage[k]["bubble_fraction"] > by_stage[2]["bubble_fraction"]
    assert by_stage[2]["bubble_fraction"] < theory
    # The bottleneck model predicts the measured span and bubbles.
    assert f["span_us"] == pytest.approx(f["modelled_span_us"], rel=0.1)
    for row in f["per_stage"]:
        assert row["bubble_fraction"] == pytest.approx(row["modelled_bubble_fraction"], abs=0.05)
    assert f["modelled_balanced_span_us"] < f["modelled_span_us"]


def test_no_pipeline_without_layout_or_point_to_point() -> None:
    from test_collectives import allreduce_job

    job = summaries(allreduce_job({0: 10_000.0, 1: 12_000.0}))
    assert analyze_pipeline(job, {0: 0.0, 1: 0.0}) is None


def test_stages_are_ordered_by_timing_when_the_layout_is_unknown() -> None:
    from dataclasses import replace

    traces = pipeline_job(3, 4, [10_000.0] * 3, [20_000.0] * 3)
    # Ranks numbered against the stage order, no layout: the order comes from timing.
    shuffled = [
        replace(t, rank={0: 2, 1: 0, 2: 1}[t.rank], parallel={}, source=f"r{t.rank}.json") for t in traces
    ]
    job = summaries(shuffled)
    res = analyze_pipeline(job, {s.rank: 0.0 for s in job})
    assert res is not None
    assert res.findings.to_dict()["stage_source"] == "p2p timing"
    assert res.stage_of == {2: 0, 0: 1, 1: 2}


def test_megatron_last_stage_is_the_bottleneck(shared_traces: Path) -> None:
    from gpuprof.readers import load_all

    job = [summarize(t) for t in load_all([shared_traces / "megatron-pp4-timeline"])]
    res = analyze_pipeline(job, {s.rank: 0.0 for s in job})
    assert res is not None
    f = res.findings.to_dict()
    assert f["stages"] == 4 and f["stage_source"] == "layout"
    assert f["microbatches"] == 4 and f["schedule"] == "1f1b"
    assert f["steps_measured"] == len(job[0].steps)
    by_stage = {r["stage"]: r for r in f["per_stage"]}
    assert all(len(r["ranks"]) == 2 for r in f["per_stage"])  # DP = 2
    slow = f["slowest_stage"]
    others = [k for k in by_stage if k != slow]
    # One stage computes far longer per microbatch than the others, which are alike.
    assert f["slowest_stage_ratio"] > 1.3
    per_mb = [by_stage[k]["compute_per_microbatch_us"] for k in others]
    assert max(per_mb) / min(per_mb) < 1.05
    # The others idle beyond the schedule's theoretical bubble; the slow stage below it.
    theory = f["theoretical_bubble_fraction"]
    assert theory == pytest.approx(3 / 7, abs=1e-4)
    for k in others:
        assert by_stage[k]["bubble_fraction"] > theory + 0.05
        assert by_stage[k]["bubble_fraction"] > by_stage[slow]["bubble_fraction"] + 0.15
    assert by_stage[slow]["bubble_fraction"] < theory
    # Measurement and the bottleneck model agree.
    assert f["span_us"] == pytest.approx(f["modelled_span_us"], rel=0.05)
    for row in f["per_stage"]:
        assert row["bubble_fraction"] == pytest.approx(row["modelled_bubble_fraction"], abs=0.05)


def test_stage_order_and_chunks_from_pipelining_annotations() -> None:
    from dataclasses import replace

    traces = pipeline_job(3, 4, [10_000.0] * 3, [20_000.0] * 3)
    job = []
    for s in summaries([replace(t, parallel={}, source=f"r{t.rank}.json") for t in traces]):
        # The annotations' stage indices say rank k runs stages k and k + 3 (v = 2).
        phases = dict(s.phases_us, pp_stage=float(s.rank), pp_chunks=2.0, forward_calls=8.0)
        job.append(replace(s, phases_us=phases))
    res = analyze_pipeline(job, {s.rank: 0.0 for s in job})
    assert res is not None
    f = res.findings.to_dict()
    assert f["stage_source"] == "annotations"
    assert res.stage_of == {0: 0, 1: 1, 2: 2}
    assert (f["chunks"], f["microbatches"], f["schedule"]) == (2, 4, "interleaved-1f1b")
    assert f["theoretical_bubble_fraction"] == pytest.approx(2 / (2 * 4 + 2), abs=1e-4)


SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
ALLREDUCE_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def kineto_pipeline_job(
    p: int, m: int, t_us: float, pieces: int = 10, dp: int = 1, drain_allreduce: bool = False
) -> list[RankTrace]:
    """A Kineto-like pipeline: each pass is ``pieces`` kernels with 5 us gaps; receives are
    NCCL SendRecv kernels that spin from when the stage is free until the data arrives;
    no parallel layout. One step, then an optimizer 2 ms later.

    With ``dp > 1`` there are ``dp`` replicas of the pipeline, ranks numbered Megatron-style
    (``rank = stage * dp + replica``) and each replica's transfers on its own process
    group, whose rank list is in stage order. With ``drain_allreduce`` every rank enters a
    step-end all-reduce after its last backward; it ends 500 us after the first stage's
    last backward (the last rank to arrive).
    """
    from rankbuilder import RankBuilder

    from gpuprof.model.timeline import ProcessGroup

    ops = simulate(p, m, [t_us] * p, [2 * t_us] * p, "gpipe")
    span = max(e for k in ops for _, _, _, e in ops[k])
    traces = []
    for d in range(dp):
        group = f"pp{d}" if dp > 1 else ""
        members = tuple(k * dp + d for k in range(p))
        for k in range(p):
            b = RankBuilder()
            b.step(1, -100.0, span + 5_000.0)
            free = 0.0

            def p2p(
                start: float, end: float, stream: int, what: str, b: RankBuilder = b, group: str = group
            ) -> None:
                b.kernel(start, end, launch_at=start - 10, name=SENDRECV, stream=stream)
                b.dev[-1].update(pg=group, coll_name=what)

            for kind, i, a, e in ops[k]:
                src = k - 1 if kind == "F" else k + 1
                if (kind == "F" and k > 0) or (kind == "B" and k < p - 1):
                    arrive = next(x[3] for x in ops[src] if x[:2] == (kind, i))
                    p2p(min(free + 5.0, arrive - 5.0), arrive, 20, "recv")  # posted after its send
                piece = (e - a) / pieces
                for j in range(pieces):
                    b.kernel(a + j * piece, a + (j + 1) * piece - 5.0, launch_at=a + j * piece - 20)
                if (kind == "F" and k < p - 1) or (kind == "B" and k > 0):
                    p2p(e, e + 5.0, 21, "send")
                free = e
            if drain_allreduce:
                b.kernel(free + 5.0, span + 500.0, launch_at=free, name=ALLREDUCE_KERNEL, stream=22)
                b.dev[-1].update(pg="world", coll_name="allreduce")
            b.kernel(span + 2_000.0, span + 3_000.0, launch_at=span + 1_990.0)
            for row in b.dev:
                row.setdefault("pg", "")
                row.setdefault("coll_name", "")
            groups = (ProcessGroup("world", None, tuple(range(p * dp))),)
            if dp > 1:
                groups += (ProcessGroup(group, None, members),)
            rank = k * dp + d
            traces.append(
                b.build(rank=rank, source=f"rank{rank}.json", world_size=p * dp, process_groups=groups)
            )
    return sorted(traces, key=lambda t: t.rank)


def test_kineto_pipeline_without_layout_is_found_and_measured() -> None:
    p, m = 4, 8
    job = summaries(kineto_pipeline_job(p, m, 10_000.0))
    res = analyze_pipeline(job, {s.rank: 0.0 for s in job})
    assert res is not None
    f = res.findings.to_dict()
    assert f["stage_source"] == "p2p timing"
    assert res.stage_of == {0: 0, 1: 1, 2: 2, 3: 3}
    assert f["span_us"] == pytest.approx((m + p - 1) * 30_000.0, rel=0.01)
    # The 5 us gaps between kernels of a pass are not bubble: slightly under the theory.
    for row in f["per_stage"]:
        assert row["bubble_fraction"] == pytest.approx(3 / 11, abs=0.01)
        assert row["bubble_fraction"] <= 3 / 11 + 0.001
    # Kernel gaps with no transfer in them are left to the other rules.
    for s in job:
        claim = res.claims[s.rank]
        assert iv.total(iv.intersect(claim, s.lost)) == pytest.approx(iv.total(claim))


def test_replicated_pipeline_stages_come_from_the_p2p_process_groups() -> None:
    from gpuprof.job.cross_rank import analyze_job
    from gpuprof.model.report import Cause

    job = summaries(kineto_pipeline_job(2, 4, 10_000.0, dp=2, drain_allreduce=True))
    res = analyze_pipeline(job, {s.rank: 0.0 for s in job})
    assert res is not None
    f = res.findings.to_dict()
    assert f["stage_source"] == "process groups"
    assert res.stage_of == {0: 0, 1: 0, 2: 1, 3: 1}
    assert f["stages"] == 2 and [r["ranks"] for r in f["per_stage"]] == [[0, 1], [2, 3]]
    assert f["schedule"] == "gpipe"  # all forward sends of the first stage before a gradient
    # The last stage drains into the step-end all-reduce: waiting for the first stage's last
    # backward there is pipeline bubble, not a straggler.
    cross = analyze_job(job)
    last = next(s for s in job if s.rank == 2)
    drain = (last.comms["coll_name"] == "allreduce").to_numpy()
    ar = (float(last.comms["start_us"][drain].iloc[0]), float(last.comms["end_us"][drain].iloc[0]))
    bubble = cross.claims[2][Cause.PIPELINE_BUBBLE]
    inside = iv.total(iv.intersect(bubble, iv.make([ar[0]], [ar[1]])))
    # (up to the first stage's last kernel, which ends 5 us before its pass does)
    assert inside == pytest.approx(ar[1] - 500.0 - ar[0], abs=10.0)
    assert f["per_stage"][1]["bubble_fraction"] == pytest.approx(1 / 5, abs=0.01)
