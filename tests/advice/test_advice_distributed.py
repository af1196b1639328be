"""Advice for distributed jobs, on constructed jobs with known answers and on real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_collectives import allreduce_job, arrivals_job, summaries
from test_cross_rank import SLOW, _with_phases
from test_pipeline_parallel import pipeline_job

from gpuprof.accounting.attribution import attribute, merge_claims
from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.summary import RankSummary
from gpuprof.advice import AdviceContext, advise, advise_all
from gpuprof.advice.distributed import communication_advice, straggler_advice
from gpuprof.advice.pipeline import pipeline_advice
from gpuprof.job.cross_rank import analyze_job
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause, RankReport


def context(job: list[RankSummary]) -> AdviceContext:
    cross = analyze_job(job)
    reports = []
    for s in job:
        att = attribute(s.lost, merge_claims(s.claims, cross.claims.get(s.rank, {})))
        reports.append(
            RankReport(
                rank=s.rank,
                device=None,
                steps=len(s.steps),
                window_us=s.window_us,
                compute_us=iv.total(s.compute),
                lost_us=att.lost_us,
            )
        )
    return AdviceContext(summaries=job, reports=reports, cross=cross.findings, whatifs=cross.whatifs)


def _step(ctx: AdviceContext) -> float:
    return max(r.window_us / max(r.steps, 1) for r in ctx.reports)


def _serial_step_us(arrive: dict[int, list[float]], fix: list[int], transfer_us: float = 200.0) -> tuple[float, float]:
    """The step of an ``arrivals_job`` simulated physically, as measured and with the ranks
    of ``fix`` computing each segment like the median rank: each rank computes a fixed
    time after the previous collective ended (the segment its arrivals imply), then joins
    the next collective, which ends ``transfer_us`` after the last arrival; the step ends
    with the same tail after the last collective (``arrivals_job``'s 100 us)."""

    def run(seg: dict[int, list[float]]) -> float:
        end = 0.0
        for k in range(len(next(iter(seg.values())))):
            end = max(end + seg[r][k] for r in seg) + transfer_us
        return end + 100.0

    ranks = sorted(arrive)
    seg: dict[int, list[float]] = {}
    for r in ranks:
        prev = 0.0
        seg[r] = []
        for k, a in enumerate(arrive[r]):
            seg[r].append(a - prev)
            prev = max(arrive[q][k] for q in ranks) + transfer_us
    fixed = dict(seg)
    for r in fix:
        fixed[r] = [float(np.median([seg[q][k] for q in ranks])) for k in range(len(seg[r]))]
    return run(seg), run(fixed)


def test_straggler_advice_names_the_slow_rank_and_saves_the_wait() -> None:
    ctx = context(_with_phases(summaries(allreduce_job(SLOW)), slow_backward=2))
    (rec,) = straggler_advice(ctx)
    assert rec.id == "straggler-rank" and rec.category is Cause.STRAGGLER
    assert rec.ranks == (2,)
    assert rec.whatif == "peer_median_compute"
    # The job with rank 2 as fast as the others, measured: each step loses the 5 ms
    # everyone waited (25 ms compute + 1 ms transfer + 0.5 ms gap -> 20 + 1 + 0.5).
    fixed = context(summaries(allreduce_job({**SLOW, 2: 20_000.0})))
    assert rec.estimated_savings_pct == pytest.approx(100 * (1 - _step(fixed) / _step(ctx)), rel=0.02)
    assert rec.estimated_savings_pct == pytest.approx(100 * 5_000 / 26_500, rel=0.02)
    text = " ".join(rec.evidence)
    assert "rank 2's backward takes 1.50x" in text and "5.0 ms per step" in text
    # Slower in every step on the same work: the GPU and node checklist, not data balancing
    # (issue 19: a rank with more work gets the work-imbalance advice instead).
    assert any("nvidia-smi" in a for a in rec.actions)
    assert not any("bucketing" in a for a in rec.actions)


def test_no_straggler_advice_for_a_balanced_job() -> None:
    ctx = context(summaries(allreduce_job({0: 20_000.0, 1: 20_000.0, 2: 20_000.0})))
    assert straggler_advice(ctx) == []


def test_partial_job_gets_advice_to_profile_every_rank_not_a_guess() -> None:
    ctx = context(summaries(allreduce_job({0: 20_000.0, 1: 25_000.0}, world_size=8)))
    (rec,) = straggler_advice(ctx)
    assert rec.id == "straggler-absent-rank"
    assert rec.ranks == ()
    assert "2 of 8 ranks" in rec.evidence[0]
    assert "rank 1 arrives last at 10 of 10" in " ".join(rec.evidence)


def test_pipeline_advice_for_a_slow_stage_and_few_microbatches() -> None:
    fwd = [10_000.0, 10_000.0, 20_000.0, 10_000.0]
    job = [summarize(t) for t in pipeline_job(4, 4, fwd, [2 * x for x in fwd], "1f1b")]
    ctx = context(job)
    recs = {r.id: r for r in pipeline_advice(ctx)}
    imb = recs["pipeline-imbalance"]
    assert imb.ranks == (2,) and imb.category is Cause.PIPELINE_BUBBLE
    assert imb.whatif == "balanced_stages"
    # The independent answer: the same job with its compute spread evenly over the stages,
    # simulated and measured.
    even = [sum(fwd) / len(fwd)] * len(fwd)
    balanced = context([summarize(t) for t in pipeline_job(4, 4, even, [2 * x for x in even], "1f1b")])
    step_now = max(r.window_us / r.steps for r in ctx.reports)
    step_even = max(r.window_us / r.steps for r in balanced.reports)
    assert imb.estimated_savings_pct == pytest.approx(100 * (1 - step_even / step_now), rel=0.1)
    assert "2.00x" in imb.evidence[0]
    bubble = recs["pipeline-bubble"]
    assert "p=4 stages, m=4 microbatches" in bubble.evidence[0]
    assert bubble.estimated_savings_pct > 0


def test_balanced_pipeline_with_many_microbatches_gets_no_pipeline_advice() -> None:
    job = [summarize(t) for t in pipeline_job(2, 32, [10_000.0] * 2, [20_000.0] * 2, "1f1b")]
    ids = {r.id for r in pipeline_advice(context(job))}
    assert "pipeline-imbalance" not in ids
    # (p-1)/(m+p-1) = 1/33: below the 10% worth advising on.
    assert "pipeline-bubble" not in ids


def _real_context(path: Path) -> AdviceContext:
    from gpuprof.readers import load_all

    return context([summarize(t) for t in load_all([path])])


def test_megatron_advice_points_at_the_slow_stage(shared_traces: Path) -> None:
    ctx = _real_context(shared_traces / "megatron-pp4-timeline")
    recs = {r.id: r for r in advise(ctx)}
    imb = recs["pipeline-imbalance"]
    assert list(imb.ranks) == list(ctx.cross.pipeline.slowest.ranks)
    assert 0 < imb.estimated_savings_pct < 50
    assert "pipeline-bubble" in recs
    comm = recs.get("comm-overlap") or recs.get("exposed-communication")
    if comm is not None:
        assert any("--overlap-grad-reduce" in a for a in comm.actions)


def test_dlrm_straggler_advice_lists_the_named_stragglers(shared_traces: Path) -> None:
    ctx = _real_context(shared_traces / "dlrm-8rank")
    recs = [r for r in straggler_advice(ctx)]
    assert [r.id for r in recs] == ["straggler-rank"]
    named = [x.rank for x in ctx.cross.stragglers]
    assert named == [7]
    # Rank 7 begins its step 3.3 ms late, and so do ranks 0, 2 and 6 (1.2-2.7 ms): the
    # replay of every late rank beginning with the median rank costs the recommendation;
    # rank 7 alone on time gains little (the next-latest then holds the collectives).
    assert recs[0].whatif == "on_time_start"
    assert list(recs[0].ranks) == [0, 2, 6, 7]
    w = ctx.whatifs
    assert recs[0].estimated_savings_pct == pytest.approx(w.savings_pct("on_time_start"))
    alone = w.model.on_time_pct([7], w.baseline.step_us)
    assert alone is not None and 0 < alone < recs[0].estimated_savings_pct
    text = " ".join(recs[0].evidence)
    assert f"{alone:.1f}%" in text
    assert "every collective" not in recs[0].title
    assert "arrival skew" in text and "one profiled step" not in text  # said under the report's headline


def test_communication_advice_only_when_exposed_communication_matters() -> None:
    ctx = context(summaries(allreduce_job({0: 20_000.0, 1: 20_000.0})))
    recs = communication_advice(ctx)
    # The local communication rule may or may not be present; when it claims the exposed
    # 1 ms transfer per 21.5 ms step, the advice says that nothing overlaps it.
    if any(r.lost_us[Cause.COMMUNICATION] > 0 for r in ctx.reports):
        (rec,) = recs
        assert rec.id == "comm-overlap"
        assert "0% of collective device time overlaps compute" in rec.evidence
    else:
        assert recs == []


def test_straggler_savings_are_the_critical_path_gain_not_the_others_waits() -> None:
    base = [2_000.0 * k for k in range(1, 6)]
    arrive = {r: [b + d for b in base] for r, d in {0: 0.0, 1: 50.0, 3: 100.0}.items()}
    arrive[2] = [b + 1_000.0 for b in base]
    job = summaries(arrivals_job(arrive, steps=3))
    ctx = context(job)
    (rec,) = straggler_advice(ctx)
    assert rec.id == "straggler-rank" and rec.ranks == (2,)
    step_us = max(s.window_us / len(s.steps) for s in job)
    # The fixed job, simulated physically: rank 2 computing each segment like the median
    # rank, every collective ends sooner and the gains add up over the step.
    now, after = _serial_step_us(arrive, [2])
    assert now == pytest.approx(step_us)
    truth = 100 * (1 - after / now)
    assert truth > 100 * 900.0 / step_us  # more than the last collective's lateness alone
    assert rec.estimated_savings_pct == pytest.approx(truth, rel=0.1)
    # Far below what removing the others' waits (0.9-1.0 ms each) would claim.
    waited = 5 * 1_000.0
    assert rec.estimated_savings_pct < 100 * waited / step_us
    assert rec.title.startswith("Rank 2 computes") and "slower than the ranks doing the same work" in rec.title
    assert not any("one profiled step" in e for e in rec.evidence)


def test_one_profiled_step_is_said_once_for_the_report_not_in_the_evidence() -> None:
    base = [2_000.0 * k for k in range(1, 6)]
    arrive = {r: list(base) for r in (0, 1, 3)}
    arrive[2] = [b + 1_000.0 for b in base]
    (rec,) = straggler_advice(context(summaries(arrivals_job(arrive, steps=1))))
    assert not any("one profiled step" in e for e in rec.evidence)


def test_rotating_lateness_gets_balance_advice_not_a_named_rank() -> None:
    base = [2_000.0 * k for k in range(1, 9)]
    arrive = {r: [b + (800.0 if k % 4 == r else 0.0) for k, b in enumerate(base)] for r in range(4)}
    job = summaries(arrivals_job(arrive, steps=2))
    (rec,) = straggler_advice(context(job))
    assert rec.id == "straggler-rotating" and set(rec.ranks) == {0, 1, 2, 3}
    step_us = max(s.window_us / len(s.steps) for s in job)
    assert rec.estimated_savings_pct == pytest.approx(100 * 8 * 800.0 / step_us, rel=1e-3)


def _slow_single_rank(transfer_us: float) -> list[RankSummary]:
    # One rank of 8 profiled: 5 all-reduces of 10 MB per step with nothing beside them.
    # At A100 link speed 10 MB needs 20 us + 17.5 MB / 240 GB/s = 93 us.
    arrive = {0: [4_000.0 * k for k in range(1, 6)]}
    return summaries(
        arrivals_job(
            arrive,
            steps=3,
            transfer_us=transfer_us,
            msg_bytes=10_000_000,
            world_size=8,
            device="NVIDIA A100-SXM4-80GB",
        )
    )


def test_a_collective_far_slower_than_its_bytes_gets_the_slow_collective_advice() -> None:
    job = _slow_single_rank(2_000.0)
    ctx = context(job)
    recs = {r.id: r for r in advise(ctx)}
    assert "communication-slow-collectives" in recs
    slow = recs["communication-slow-collectives"]
    top = max(recs.values(), key=lambda r: r.estimated_savings_pct)
    assert top.id == "communication-slow-collectives"
    assert slow.ranks == ()  # the late ranks are not in the input
    assert slow.actions[0].startswith("Profile all ranks")
    step_us = job[0].window_us / 3
    need = 20.0 + 17.5e6 / 240e3
    lost = ctx.reports[0].lost_us[Cause.COMMUNICATION] / 3
    assert lost == pytest.approx(5 * 2_000.0, rel=0.01)
    assert slow.estimated_savings_pct == pytest.approx(100 * 5 * (2_000.0 - need) / step_us, rel=0.01)
    text = " ".join(slow.evidence)
    assert "GB/s" in text and "link peak" in text
    assert any("NCCL_DEBUG=INFO" in a for a in slow.actions)
    # Overlap can only hide the transfer itself: half of 5 x 93 us per step.
    overlap = recs.get("comm-overlap")
    if overlap is not None:
        assert overlap.estimated_savings_pct == pytest.approx(100 * 0.5 * 5 * need / step_us, rel=0.01)


def test_a_collective_at_link_speed_gets_no_slow_collective_advice() -> None:
    ctx = context(_slow_single_rank(150.0))
    ids = [r.id for r in advise(ctx)]
    assert "communication-slow-collectives" not in ids


def test_inference_gets_no_backward_overlap_advice() -> None:
    job = summaries(allreduce_job({0: 20_000.0, 1: 20_000.0}))
    from dataclasses import replace

    job = [replace(s, facts=replace(s.facts, workload="inference")) for s in job]
    (rec,) = communication_advice(context(job))
    assert rec.id == "exposed-communication"
    words = " ".join((rec.title, *rec.actions)).lower()
    assert "backward" not in rec.title.lower() and "bucket" not in words and "fsdp" not in words
    assert "tensor-parallel" in words
    train = [replace(s, facts=replace(s.facts, workload="training")) for s in job]
    (rec,) = communication_advice(context(train))
    assert rec.id == "comm-overlap" and any("bucket" in a for a in rec.actions)


def test_mi300_slow_all_reduces_are_not_called_an_overlap_problem(shared_traces: Path) -> None:
    # One rank of 8: 5.7 MB and 17.6 MB bf16 all-reduces take 6.6-9.2 ms (1-3 GB/s of a
    # ~896 GB/s link), so most of that time is waiting for ranks that are not in the trace.
    ctx = _real_context(shared_traces / "mi300-resnet-ckpt-rank0")
    if not ctx.cross.collective_bandwidth:
        pytest.skip(
            "the Kineto reader does not yet give collective message sizes (record_param_comms nelems x dtype)"
        )
    recs = advise(ctx)
    assert recs[0].id == "communication-slow-collectives", [r.id for r in recs]
    text = " ".join(recs[0].evidence)
    assert "GB/s" in text and "MI300X" in text
    overlap = [r for r in recs if r.id == "comm-overlap"]
    assert all(r.estimated_savings_pct < recs[0].estimated_savings_pct / 5 for r in overlap)


def test_b200_inference_gets_no_backward_overlap_advice(shared_traces: Path) -> None:
    ctx = _real_context(shared_traces / "b200-eager-rank0")
    for rec in advise(ctx):
        if rec.category is Cause.COMMUNICATION:
            words = " ".join((rec.title, *rec.actions)).lower()
            assert "backward" not in rec.title.lower() and "fsdp" not in words and "bucket" not in words
    comm = communication_advice(ctx)
    assert [r.id for r in comm] in ([], ["exposed-communication"])


def test_barrier_advice_names_the_communication_that_makes_ranks_late() -> None:
    from test_collectives import timeline_late_comm_job

    comm = {0: [30_000.0, 2_000.0, 2_000.0, 2_000.0], 3: [30_000.0, 2_000.0, 2_000.0, 2_000.0]}
    job = summaries(timeline_late_comm_job(comm))
    ctx = context(job)
    (rec,) = straggler_advice(ctx)
    assert rec.ranks == (0, 3)
    assert "embedding-gradient all-reduce" in rec.title
    text = " ".join(rec.evidence)
    assert "embedding-grads-all-reduce: 2.0 ms median" in text and "2 outlier calls of 30.0 ms" in text
    assert any("untie" in a for a in rec.actions)
    # Critical path: the barrier comes sooner by the waiting ranks' wait (the smallest of them).
    waits = [r.lost_us[Cause.STRAGGLER] / r.steps for r in ctx.reports if r.rank in (1, 2)]
    step_us = max(r.window_us / r.steps for r in ctx.reports)
    assert rec.estimated_savings_pct == pytest.approx(100 * min(waits) / step_us, rel=0.01)


def test_megatron_straggler_item_is_the_embedding_all_reduce_and_pipeline_items_say_they_overlap(
    shared_traces: Path,
) -> None:
    recs = {r.id: r for r in advise(_real_context(shared_traces / "megatron-pp4-timeline"))}
    st = recs["straggler-rank"]
    assert set(st.ranks) == {0, 1, 6, 7}
    assert "embedding" in st.title and "stages 0, 3" in st.title.lower()
    text = " ".join(st.evidence)
    assert "embedding-grads-all-reduce: 10.5 ms median" in text and "outlier calls of 266.3 ms-292.6 ms" in text
    # Balancing the stages and doubling the microbatches compound (each shrinks what the
    # other acts on less than it adds): one replay of both together says so, within what
    # the worst rank loses.
    ctx = _real_context(shared_traces / "megatron-pp4-timeline")
    got = advise_all(ctx)
    recs_all, combined = got.recommendations, got.combined_savings_pct
    pipe = [r.estimated_savings_pct for r in recs_all if r.id in ("pipeline-bubble", "pipeline-imbalance")]
    lost = max(sum(r.lost_us.values()) / r.window_us for r in ctx.reports)
    assert combined is not None and max(pipe) <= combined <= 100 * lost


def test_slow_transfers_in_complete_groups_point_at_the_transport_not_at_late_ranks() -> None:
    from test_linkspeed import _late_rank_job

    recs = {r.id: r for r in advise(context(_late_rank_job(3_000.0)))}
    slow = recs["communication-slow-collectives"]
    assert slow.ranks == (0, 1, 2, 3)
    assert "transport" in slow.title and "profile all ranks" not in slow.title
    # Every member is in the input: the actions test the transport, not "profile all ranks".
    assert not any(a.startswith("Profile all ranks") for a in slow.actions)
    assert any("all_reduce_perf" in a for a in slow.actions) and any("NCCL_DEBUG=INFO" in a for a in slow.actions)
    assert "straggler-rank" in recs and recs["straggler-rank"].ranks == (2,)
    assert "communication-slow-collectives" not in {r.id for r in advise(context(_late_rank_job(120.0)))}


def test_partial_job_without_sizes_says_to_profile_all_ranks_before_tuning_communication() -> None:
    partial = context(summaries(allreduce_job({0: 20_000.0}, world_size=8)))
    (rec,) = communication_advice(partial)
    assert "profile all ranks first" in rec.title and rec.actions[0].startswith("Profile all ranks")
    whole = context(summaries(allreduce_job({0: 20_000.0, 1: 20_000.0})))
    (rec,) = communication_advice(whole)
    assert "profile all ranks" not in rec.title.lower()


def test_two_stragglers_late_together_save_their_joint_lead_not_their_margins_over_each_other() -> None:
    # Ranks 3 and 4 both arrive about 1 ms late, taking turns at being last (by 100 us);
    # ranks 0-2 arrive 0, 50 and 100 us in. Fixing both ends each collective 900 us sooner.
    base = [3_000.0 * k for k in range(1, 7)]
    arrive = {r: [b + d for b in base] for r, d in {0: 0.0, 1: 50.0, 2: 100.0}.items()}
    arrive[3] = [b + (1_000.0 if k % 2 == 0 else 900.0) for k, b in enumerate(base)]
    arrive[4] = [b + (900.0 if k % 2 == 0 else 1_000.0) for k, b in enumerate(base)]
    job = summaries(arrivals_job(arrive, steps=2))
    ctx = context(job)
    assert sorted(x.rank for x in ctx.cross.stragglers) == [3, 4]
    assert all(x.gain_us_per_step == pytest.approx(3 * 100.0) for x in ctx.cross.stragglers)
    (rec,) = straggler_advice(ctx)
    assert rec.ranks in ((3, 4), (4, 3))
    step_us = max(s.window_us / len(s.steps) for s in job)
    # The fixed job, simulated physically: both at the median pace.
    now, after = _serial_step_us(arrive, [3, 4])
    assert now == pytest.approx(step_us)
    assert rec.estimated_savings_pct == pytest.approx(100 * (1 - after / now), rel=0.1)


def test_sampled_ranks_with_unmeasurable_bandwidth_say_to_profile_all_ranks_first(shared_traces: Path) -> None:
    # 2 of 128 ranks: the collectives' bandwidth is "not measurable" (the other members are
    # not in the input), so their exposed time may be waiting for absent ranks.
    recs = communication_advice(_real_context(shared_traces / "hta-sampled-2rank"))
    assert [r.id for r in recs] == ["exposed-communication"]
    (rec,) = recs
    assert "profile all ranks first" in rec.title and rec.actions[0].startswith("Profile all ranks")
