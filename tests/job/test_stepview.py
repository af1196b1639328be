"""The timeline of one representative step per rank: which step, which clock, bounded size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuprof.accounting.attribution import Attribution, attribute
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.findings import CriticalStep, JobFindings, RankRow
from gpuprof.job.stepview import BINS, MAX_SEGMENTS, step_timeline
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause
from gpuprof.model.timeline import Step

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _summary(rank: int, steps: list[tuple[int, float, float]], compute: list[tuple[float, float]]) -> RankSummary:
    lo, hi = steps[0][1], steps[-1][2]
    comp = iv.union([a for a, _ in compute], [b for _, b in compute])
    return RankSummary(
        rank=rank, source=f"rank{rank}.json", fmt="kineto", device_name=None, device_memory_bytes=None,
        window=(lo, hi), steps=tuple(Step(n, a, b) for n, a, b in steps), compute=comp,
        lost=iv.complement(comp, lo, hi), claims={}, comms=pd.DataFrame(),
    )  # fmt: skip


def _att(s: RankSummary, claims: dict[Cause, list[tuple[float, float]]]) -> Attribution:
    return attribute(s.lost, {c: iv.union([a for a, _ in v], [b for _, b in v]) for c, v in claims.items()})


def _findings(offsets: dict[int, float] | None = None, stages: dict[int, int] | None = None,
              critical: list[tuple[int, int]] | None = None) -> JobFindings:
    """Job findings with only what the step view reads: clock offsets, stages, and the
    rank that set the pace of each step (``(step, rank)``)."""
    ranks = set(offsets or {}) | set(stages or {})
    per_rank = {
        r: RankRow(straggler_wait_us=0.0, hidden_wait_us=0.0, straggler_wait_us_per_step=0.0,
                   is_straggler=False, last_arrivals=0, collectives=0,
                   clock_offset_us=(offsets or {}).get(r, 0.0), stage=(stages or {}).get(r))
        for r in ranks
    }
    crit = tuple(CriticalStep(step=st, rank=r, waited_us=0.0, others_median_waited_us=0.0)
                 for st, r in (critical or []))
    return JobFindings(measured=True, per_rank=per_rank, critical_rank_per_step=crit)


def _lane(tl: dict[str, Any], rank: int) -> dict[str, Any]:
    return next(x for x in tl["lanes"] if x["rank"] == rank)


def test_median_step_on_the_common_clock_with_each_kind_in_place() -> None:
    # Rank 0: steps of 1000, 3000, 2000 µs; its clock runs 500 µs ahead of rank 1's.
    s0 = _summary(0, [(1, 500, 1500), (2, 1500, 4500), (3, 4500, 6500)], [(500, 1500), (1500, 3500), (4500, 6000)])
    s1 = _summary(1, [(1, 0, 1000), (2, 1000, 4000), (3, 4000, 6000)], [(0, 1000), (1000, 4000), (4000, 5000)])
    a0 = _att(s0, {Cause.STRAGGLER: [(3500, 4500)], Cause.HOST: [(6000, 6500)]})
    a1 = _att(s1, {Cause.DATALOADER: [(5000, 6000)]})
    tl = step_timeline([s0, s1], {0: a0, 1: a1}, _findings(offsets={0: 500.0, 1: 0.0}))
    assert tl is not None
    assert tl["step"] == 3  # job step times 1000, 3000, 2000: the median is step 3
    assert tl["clock_offsets_applied"] is True
    l0, l1 = _lane(tl, 0), _lane(tl, 1)
    # Both ranks start step 3 at the same instant once rank 0's offset is taken off.
    assert l0["start_us"] == l1["start_us"] == 0.0 and l0["end_us"] == l1["end_us"] == 2000.0
    assert [s[0] for s in l0["segments"]] == ["compute", "host"]
    assert l0["segments"][0][2] == pytest.approx(1500, abs=2 * tl["bin_us"])
    assert [s[0] for s in l1["segments"]] == ["compute", "dataloader"]
    assert l1["segments"][1][1] == pytest.approx(1000, abs=2 * tl["bin_us"])


def test_slowest_rank_is_the_one_the_others_wait_for_and_critical_path_is_marked() -> None:
    fast = _summary(0, [(1, 0, 1000)], [(0, 600)])
    slow = _summary(1, [(1, 0, 1000)], [(0, 1000)])
    a_fast = _att(fast, {Cause.STRAGGLER: [(600, 1000)]})
    a_slow = _att(slow, {})
    crit = [(1, 1)]
    tl = step_timeline([fast, slow], {0: a_fast, 1: a_slow}, _findings(critical=crit))
    assert tl is not None
    assert tl["slowest_rank"] == 1 and tl["critical_rank"] == 1
    assert tl["critical_path"] == [{"rank": 1, "start_us": 0.0, "end_us": 1000.0}]
    assert tl["critical_path_source"] == "critical_rank_per_step"
    assert [s[0] for s in _lane(tl, 0)["segments"]] == ["compute", "straggler"]


def test_without_common_steps_each_window_is_shown() -> None:
    a = _summary(0, [(1, 0, 100)], [(0, 100)])
    b = _summary(1, [(7, 0, 200)], [(0, 150)])
    tl = step_timeline([a, b], {0: _att(a, {}), 1: _att(b, {})}, _findings())
    assert tl is not None and tl["step"] is None
    assert _lane(tl, 1)["end_us"] == 200.0


def test_size_is_bounded_however_fragmented_the_step() -> None:
    # Kernels of 60 µs with 60 µs of host time between them over 40 ms: a run per 1.5 bins
    # at full resolution, far more than MAX_SEGMENTS, so the lane is drawn coarser.
    starts = np.arange(0, 40_000, 120.0)
    s = _summary(0, [(1, 0, 40_000)], list(zip(starts, starts + 60)))
    att = _att(s, {Cause.HOST: list(zip(starts + 60, starts + 120))})
    tl = step_timeline([s], {0: att}, _findings())
    assert tl is not None
    assert tl["bin_us"] == pytest.approx(40_000 / BINS)
    segs = tl["lanes"][0]["segments"]
    assert MAX_SEGMENTS // 4 < len(segs) <= MAX_SEGMENTS
    assert {k for k, _, _ in segs} == {"compute", "host"}
    # Segments tile the step in order without overlap, from its start to its end.
    assert all(a[2] <= b[1] for a, b in zip(segs, segs[1:]))
    assert segs[0][1] == 0.0 and segs[-1][2] == 40_000.0


def test_many_ranks_keep_slowest_critical_and_a_stage_head_each() -> None:
    summaries, atts = [], {}
    for r in range(100):
        work = 1000.0 if r != 57 else 1500.0
        s = _summary(r, [(1, 0, 1500)], [(0, work)])
        summaries.append(s)
        atts[r] = _att(s, {Cause.STRAGGLER: [(work, 1500)]} if work < 1500 else {})
    stages = {r: r // 25 for r in range(100)}
    crit = [(1, 90)]
    tl = step_timeline(summaries, atts, _findings(stages=stages, critical=crit), max_lanes=8)
    assert tl is not None
    ranks = [x["rank"] for x in tl["lanes"]]
    assert len(ranks) == 8 and ranks == sorted(ranks)
    assert {57, 90, 0, 25, 50, 75} <= set(ranks)
    assert tl["ranks_total"] == 100
    assert _lane(tl, 25)["stage"] == 1


def test_no_timeline_without_a_rank_to_draw() -> None:
    empty = RankSummary(
        rank=0, source="cpu.json", fmt="kineto", device_name=None, device_memory_bytes=None, window=(0.0, 0.0),
        steps=(), compute=iv.empty(), lost=iv.empty(), claims={}, comms=pd.DataFrame(), empty_reason="CPU-only trace",
    )  # fmt: skip
    assert step_timeline([empty], {0: attribute(iv.empty(), {})}, {}) is None


def test_pipeline_report_carries_a_timeline_with_stages_and_it_survives_json() -> None:
    from gpuprof.model.report import report_from_dict, report_to_dict
    from gpuprof.pipeline import analyze_paths

    rep = analyze_paths([SAMPLES / "pipeline-1f1b"])
    tl = rep.extra["timeline"]
    assert sorted(x["stage"] for x in tl["lanes"]) == [0, 1, 2, 3]
    kinds = {s[0] for x in tl["lanes"] for s in x["segments"]}
    assert {"compute", "pipeline_bubble"} <= kinds
    # Each lane's bubble in the shown step is near the measured per-stage bubble share.
    for lane in tl["lanes"]:
        bubble = sum(b - a for k, a, b in lane["segments"] if k == "pipeline_bubble")
        assert 0.15 < bubble / (lane["end_us"] - lane["start_us"]) < 0.45
    again = report_from_dict(json.loads(json.dumps(report_to_dict(rep))))
    assert again.extra["timeline"] == tl
