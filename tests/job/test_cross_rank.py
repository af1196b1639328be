"""Job-level analysis: straggler and bubble claims, and the findings the report carries."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_collectives import allreduce_job, arrivals_job, summaries, timeline_late_comm_job
from test_pipeline_parallel import pipeline_job

from gpuprof.accounting.attribution import attribute, merge_claims
from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.cross_rank import analyze_job
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause

SLOW = {0: 20_000.0, 1: 20_000.0, 2: 25_000.0, 3: 20_000.0}


def _with_phases(job: list[RankSummary], slow_backward: int) -> list[RankSummary]:
    out = []
    for s in job:
        back = 15_000.0 if s.rank == slow_backward else 10_000.0
        out.append(replace(s, phases_us={"forward": 5_000.0, "backward": back, "optimizer": 1_000.0}))
    return out


def test_late_rank_is_named_with_its_slow_phase_and_others_get_straggler_claims() -> None:
    job = _with_phases(summaries(allreduce_job(SLOW)), slow_backward=2)
    res = analyze_job(job)
    f = res.findings.to_dict()
    json.dumps(f)  # plain JSON all the way down
    assert [x["rank"] for x in f["stragglers"]] == [2]
    st = f["stragglers"][0]
    assert st["phase"] == "backward" and st["phase_ratio"] == pytest.approx(1.5)
    assert st["last_arrivals"] == 10 and st["collectives"] == 10
    assert st["caused_wait_us_per_step"] == pytest.approx(5_000.0)
    assert set(res.claims) == {0, 1, 3}
    for r in (0, 1, 3):
        assert iv.total(res.claims[r][Cause.STRAGGLER]) == pytest.approx(50_000.0)
        assert f["per_rank"][r]["straggler_wait_us_per_step"] == pytest.approx(5_000.0)
        assert f["per_rank"][r]["is_straggler"] is False
    assert f["per_rank"][2]["is_straggler"] is True
    assert {c["rank"] for c in f["critical_rank_per_step"]} == {2}
    assert len(f["critical_rank_per_step"]) == 10
    imb = f["compute_imbalance"]["across_ranks"]
    assert imb["max_rank"] == 2 and imb["max_over_median"] == pytest.approx(1.25)


def test_clock_skew_does_not_change_the_findings() -> None:
    plain = analyze_job(summaries(allreduce_job(SLOW)))
    skewed = analyze_job(summaries(allreduce_job(SLOW, skew_us={3: 1_000_000.0, 2: -250_000.0})))
    assert [x["rank"] for x in skewed.findings.to_dict()["stragglers"]] == [2]
    for r in SLOW:
        a = plain.findings.to_dict()["per_rank"][r]["straggler_wait_us"]
        assert skewed.findings.to_dict()["per_rank"][r]["straggler_wait_us"] == pytest.approx(a)
    # Claims stay on each rank's own clock.
    assert skewed.claims[3][Cause.STRAGGLER][0][0] > 1_000_000.0


def test_jitter_below_the_threshold_names_nobody() -> None:
    res = analyze_job(summaries(allreduce_job({0: 20_000.0, 1: 20_010.0, 2: 20_005.0, 3: 20_000.0})))
    assert res.findings.to_dict()["stragglers"] == []


def test_partial_job_measures_waits_but_names_no_straggler() -> None:
    res = analyze_job(summaries(allreduce_job({0: 20_000.0, 1: 25_000.0}, world_size=8)))
    f = res.findings.to_dict()
    assert f["stragglers"] == []
    assert "absent" in f["straggler_analysis"]["note"]
    assert f["straggler_analysis"]["incomplete_groups"] == {"0": {"present": 2, "expected": 8}}
    assert iv.total(res.claims[0][Cause.STRAGGLER]) == pytest.approx(50_000.0)


def test_single_rank_has_no_straggler_claim_but_says_why() -> None:
    res = analyze_job(summaries(allreduce_job({0: 20_000.0}, world_size=2)))
    assert res.claims == {}
    assert "cannot be measured" in res.findings.to_dict()["straggler_analysis"]["note"]
    assert res.findings.to_dict()["critical_rank_per_step"] == []
    assert analyze_job([]).claims == {}


def test_pipeline_job_claims_bubbles_and_names_the_slow_stage_critical() -> None:
    fwd = [10_000.0, 10_000.0, 20_000.0, 10_000.0]
    job = [summarize(t) for t in pipeline_job(4, 8, fwd, [2 * x for x in fwd], "1f1b")]
    res = analyze_job(job)
    f = res.findings.to_dict()
    json.dumps(f)
    assert f["pipeline"]["slowest_stage"] == 2
    assert {c["rank"] for c in f["critical_rank_per_step"]} == {2}
    assert f["compute_imbalance"]["across_stages"]["max_stage"] == 2
    assert f["per_rank"][0]["stage"] == 0 and f["per_rank"][2]["stage"] == 2
    for s in job:
        att = attribute(s.lost, merge_claims(s.claims, res.claims.get(s.rank, {})))
        compute = iv.total(s.compute)
        assert compute + sum(att.lost_us.values()) == pytest.approx(s.window_us, rel=1e-9)
        # Bubble wins over everything else where it claims.
        assert att.lost_us[Cause.PIPELINE_BUBBLE] == pytest.approx(
            iv.total(iv.intersect(s.lost, res.claims[s.rank][Cause.PIPELINE_BUBBLE]))
        )
    bubble = {s.rank: res.claims[s.rank][Cause.PIPELINE_BUBBLE] for s in job}
    assert iv.total(bubble[2]) < min(iv.total(bubble[k]) for k in (0, 1, 3))


def _real(path: Path) -> list[RankSummary]:
    from gpuprof.readers import load_all

    return [summarize(t) for t in load_all([path])]


def test_dlrm_straggler_is_the_rank_everyone_waits_for(shared_traces: Path) -> None:
    job = _real(shared_traces / "dlrm-8rank")
    res = analyze_job(job)
    f = res.findings.to_dict()
    json.dumps(f)
    assert f["stragglers"], "the 8 ranks wait milliseconds per step: someone is late"
    per = f["per_rank"]
    waits = {r: per[r]["straggler_wait_us"] for r in per}
    for st in f["stragglers"]:
        r = st["rank"]
        others = [w for k, w in waits.items() if k != r]
        assert waits[r] < float(np.median(others))
        assert st["last_arrivals"] > st["collectives"] / 2
    crit = f["critical_rank_per_step"]
    assert len(crit) == 1 and crit[0]["rank"] in {x["rank"] for x in f["stragglers"]}
    assert set(res.claims) == set(range(8)) - {r for r in range(8) if waits[r] == 0}


def test_megatron_critical_rank_is_on_the_slowest_stage(shared_traces: Path) -> None:
    job = _real(shared_traces / "megatron-pp4-timeline")
    res = analyze_job(job)
    f = res.findings.to_dict()
    json.dumps(f)
    slow = set(f["pipeline"]["slowest_stage_ranks"])
    assert len(f["critical_rank_per_step"]) == len(job[0].steps)
    assert {c["rank"] for c in f["critical_rank_per_step"]} <= slow
    assert f["compute_imbalance"]["across_stages"]["max_stage"] == f["pipeline"]["slowest_stage"]
    assert all(Cause.PIPELINE_BUBBLE in res.claims[s.rank] for s in job)


def test_partial_and_single_rank_jobs_say_what_cannot_be_known(shared_traces: Path) -> None:
    sampled = analyze_job(_real(shared_traces / "hta-sampled-2rank")).findings.to_dict()
    assert sampled["stragglers"] == []
    assert sampled["straggler_analysis"]["incomplete_groups"]["(unnamed)"] == {"present": 2, "expected": 128}
    single = analyze_job(_real(shared_traces / "a100-2rank-nccl"))
    assert single.claims == {}
    assert "1 of 2 ranks" in single.findings.to_dict()["straggler_analysis"]["note"]


def test_megatron_barrier_waits_are_for_the_ranks_still_communicating(shared_traces: Path) -> None:
    job = _real(shared_traces / "megatron-pp4-timeline")
    f = analyze_job(job).findings.to_dict()
    b = f["barrier_waits"]
    assert b["barriers"] == len(job[0].steps)  # one synchronized start per step
    stage = {r: v["stage"] for r, v in f["per_rank"].items()}
    waited_for = b["waited_for_ranks"]
    assert waited_for
    waiters = [r for r in stage if r not in waited_for]
    # The ranks waited for do not wait themselves; the others wait for them every step.
    for r in waiters:
        assert b["wait_us_per_step"][str(r)] > 10 * max(b["wait_us_per_step"][str(w)] for w in waited_for)
    # Whole data-parallel groups (stages) arrive late together ...
    late_stages = {stage[r] for r in waited_for}
    assert {r for r in stage if stage[r] in late_stages} == set(waited_for)
    # ... because of their own communication, not compute.
    assert "compute" not in list(b["last_activity"])[:1]


def test_single_gpu_job_gets_no_note_about_missing_ranks() -> None:
    from rankbuilder import RankBuilder

    b = RankBuilder()
    b.step(1, 0.0, 1_000.0)
    b.kernel(10.0, 900.0, launch_at=0.0)
    res = analyze_job([summarize(b.build())])
    assert "note" not in res.findings.to_dict()["straggler_analysis"]
    assert res.claims == {}


def test_critical_path_gain_is_the_margin_over_the_next_latest_rank() -> None:
    # Rank 2 arrives 1 ms after the start of each of 5 collectives; ranks 0, 1, 3 arrive
    # 0, 50 and 100 us in: rank 2's margin over the next-latest (rank 3) is 900 us each time.
    base = [2_000.0 * k for k in range(1, 6)]
    arrive = {r: [b + d for b in base] for r, d in {0: 0.0, 1: 50.0, 3: 100.0}.items()}
    arrive[2] = [b + 1_000.0 for b in base]
    f = analyze_job(summaries(arrivals_job(arrive, steps=3))).findings.to_dict()
    (st,) = f["stragglers"]
    assert st["rank"] == 2 and st["last_arrivals"] == 15
    assert st["gain_us_per_step"] == pytest.approx(5 * 900.0)
    assert st["gains_us"] == pytest.approx([900.0] * 15)
    assert f["straggler_analysis"]["arrivals"]["rotating"] is False
    # The others wait far longer than the gain: 1000, 950, 900 us each time.
    assert st["caused_wait_us_per_step"] == pytest.approx(5 * 950.0)


def test_lateness_that_moves_between_ranks_names_no_straggler() -> None:
    base = [2_000.0 * k for k in range(1, 9)]
    arrive = {r: [b + (800.0 if k % 4 == r else 0.0) for k, b in enumerate(base)] for r in range(4)}
    f = analyze_job(summaries(arrivals_job(arrive, steps=2))).findings.to_dict()
    assert f["stragglers"] == []
    arr = f["straggler_analysis"]["arrivals"]
    assert arr["rotating"] is True and arr["last_counts"] == {"0": 4, "1": 4, "2": 4, "3": 4}
    assert arr["gain_us_per_step"] == pytest.approx(8 * 800.0)


def test_ranks_that_start_the_step_early_are_reported_as_arrival_skew() -> None:
    # Ranks 1 and 3 begin 5 ms before the others, run the same compute and then wait.
    base = [8_000.0, 10_000.0, 12_000.0]
    arrive = {r: list(base) for r in range(6)}
    arrive[5] = [b + 300.0 for b in base]
    early = {1: -5_000.0, 3: -5_000.0}
    arrive[1] = [b - 5_000.0 for b in base[:1]] + base[1:]
    arrive[3] = [b - 5_000.0 for b in base[:1]] + base[1:]
    job = arrivals_job(arrive, steps=2, step_start_us={r: 5_000.0 + early.get(r, 0.0) for r in range(6)})
    f = analyze_job(summaries(job)).findings.to_dict()
    skew = f["straggler_analysis"]["early_starters"]
    assert sorted(e["rank"] for e in skew) == [1, 3]
    assert all(e["lead_us"] == pytest.approx(5_000.0) for e in skew)


def test_barrier_findings_say_what_the_late_ranks_communicate_before_it() -> None:
    # Ranks 0 and 3 run a 2 ms embedding all-reduce after compute (30 ms at step 0);
    # ranks 1 and 2 have nothing to do and wait at the optimizer barrier.
    comm = {0: [30_000.0, 2_000.0, 2_000.0, 2_000.0], 3: [30_000.0, 2_000.0, 2_000.0, 2_000.0]}
    f = analyze_job(summaries(timeline_late_comm_job(comm))).findings.to_dict()
    b = f["barrier_waits"]
    assert b["waited_for_ranks"] == [0, 3]
    (op,) = b["late_comm"]
    assert op["name"] == "embedding-grads-all-reduce" and op["only_late_ranks"] is True
    assert op["calls"] == 8 and op["median_us"] == pytest.approx(2_000.0)
    assert op["outliers"] == 2 and op["outlier_us"] == pytest.approx([30_000.0, 30_000.0])
    assert op["outlier_barriers"] == [0]


def test_a_rank_that_starts_early_but_works_longer_is_not_arrival_skew() -> None:
    # Rank 1 starts 5 ms early and computes 5 ms more before the first collective.
    base = [8_000.0, 10_000.0, 12_000.0]
    arrive = {r: list(base) for r in range(6)}
    job = arrivals_job(arrive, steps=2, step_start_us={r: (0.0 if r == 1 else 5_000.0) for r in range(6)})
    f = analyze_job(summaries(job)).findings.to_dict()
    assert "early_starters" not in f["straggler_analysis"]
