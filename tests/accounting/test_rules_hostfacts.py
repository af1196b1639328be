"""Host facts: where host lost time sits (enclosing ops), workload, DDP buffer sync, trust
and low-data warnings -- on constructed traces whose answer is known, and relations on the
real traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from rankbuilder import RankBuilder
from test_advice_local import _ctx, _one

from gpuprof.accounting.summarize import summarize
from gpuprof.advice import local
from gpuprof.model.notice import words
from gpuprof.model.report import Cause
from gpuprof.model.timeline import Kind
from gpuprof.pipeline import analyze_paths


def _optimizer_stall(b: RankBuilder, t0: float) -> None:
    """One 10 ms step: a kernel, then 5 ms in Shampoo.step's single long CPU op (no
    launches) while the next kernel waits queued, then the next kernel."""
    b.step(int(t0 // 10000) + 1, t0, t0 + 10000)
    b.kernel(t0, t0 + 4000, launch_at=t0 - 20)
    b.host(t0 + 3900, t0 + 9100, "Optimizer.step#Shampoo.step", kind=Kind.ANNOTATION)
    b.host(t0 + 3950, t0 + 9050, "aten::_foreach_mul_")
    b.kernel(t0 + 9000, t0 + 10000, launch_at=t0 + 3920)


def test_gap_inside_a_long_launch_free_optimizer_op_is_host_and_named() -> None:
    b = RankBuilder()
    for k in range(2):
        _optimizer_stall(b, k * 10000.0)
    s = summarize(b.build())
    top = s.facts.lost_by_op["host"][0]
    assert top.op == "Optimizer.step#Shampoo.step"
    assert top.lost_us_per_step == pytest.approx(5000, rel=0.01)
    assert top.inner_op == "aten::_foreach_mul_"
    assert top.inner_longest_us == pytest.approx(5100)
    assert s.facts.local_lost_us_by_rule["blocked_host"] == pytest.approx(10000, rel=0.01)
    assert s.facts.local_lost_us_by_rule["unclaimed"] < 100
    rec = _one(local.host_launch, _ctx(b.build()))
    assert any("Optimizer.step#Shampoo.step" in e and "aten::_foreach_mul_" in e for e in rec.evidence)
    assert any(a.startswith("Optimizer.step#Shampoo.step runs long") for a in rec.actions)


def test_enclosing_op_counts_its_launches() -> None:
    # zero_grad launches 12 zero-fill kernels of 2 µs, 40 µs apart, each step: the device
    # waits on the host all through it.
    b = RankBuilder()
    for k in range(2):
        t0 = k * 2000.0
        b.step(k + 1, t0, t0 + 2000)
        b.kernel(t0, t0 + 100, launch_at=t0 - 20)
        b.host(t0 + 100, t0 + 600, "Optimizer.zero_grad#SGD.zero_grad")
        for i in range(12):
            t = t0 + 110 + 40 * i
            b.kernel(t + 6, t + 8, launch_at=t)
        b.kernel(t0 + 700, t0 + 2000, launch_at=t0 + 690)
    ctx = _ctx(b.build())
    top = ctx.summaries[0].facts.lost_by_op["host"][0]
    assert top.op == "Optimizer.zero_grad#SGD.zero_grad"
    assert top.launches_per_call == 12
    rec = _one(local.host_launch, ctx)
    assert any("2 calls, 12 kernel launches each" in e for e in rec.evidence)
    assert any("set_to_none=True" in a for a in rec.actions)


def test_phase_annotations_are_looked_through() -> None:
    # 300 µs of host lost time: 200 inside aten::conv2d, 100 in Python, all in ## forward ##.
    b = RankBuilder()
    b.step(1, 0, 1000)
    b.host(0, 1000, "## forward ##", kind=Kind.ANNOTATION)
    b.kernel(0, 100, launch_at=-20)
    b.host(100, 300, "aten::conv2d")
    b.kernel(410, 1000, launch_at=395)
    s = summarize(b.build())
    got = {o.op: o.lost_us for o in s.facts.lost_by_op["host"]}
    assert got["aten::conv2d"] == pytest.approx(200)
    assert got["## forward ##"] == pytest.approx(110)


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        (
            ["aten::mm", "autograd::engine::evaluate_function: MmBackward0", "Optimizer.step#AdamW.step"],
            "training",
        ),
        (["aten::mm", "vllm::unified_attention_with_output", "execute_model"], "inference"),
        (["aten::mm", "aten::add"], None),
    ],
)
def test_workload_from_op_names(ops: list[str], expected: str | None) -> None:
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    for i, name in enumerate(ops):
        b.host(10 * i, 10 * i + 5, name)
    assert summarize(b.build()).facts.workload == expected


def test_inference_host_advice_is_not_training_advice() -> None:
    b = RankBuilder(launch_us=8)
    b.host(0, 3000, "execute_model")
    for i in range(100):
        t = i * 30.0
        b.host(t, t + 25, "vllm::moe_forward")
        b.kernel(t + 24, t + 26, launch_at=t + 15)
    ctx = _ctx(b.build())
    assert ctx.summaries[0].facts.workload == "inference"
    rec = _one(local.host_launch, ctx)
    text = " ".join(rec.actions)
    assert "enforce_eager" in text and "CUDA graph" in text
    assert "zero_grad" not in text and "optimizer" not in text.lower()


def _ddp_step(b: RankBuilder, t0: float) -> None:
    """A 10 ms step whose forward first spends 3 ms broadcasting DDP buffers."""
    b.step(int(t0 // 10000) + 1, t0, t0 + 10000)
    b.host(t0, t0 + 9000, "DistributedDataParallel.forward", kind=Kind.ANNOTATION)
    b.host(t0 + 10, t0 + 1000, "aten::flatten_dense_tensors")
    b.host(t0 + 1000, t0 + 1100, "c10d::broadcast_")
    b.host(t0 + 1100, t0 + 3010, "aten::unflatten_dense_tensors")
    b.kernel(t0 + 3020, t0 + 10000, launch_at=t0 + 3012)


def test_ddp_buffer_sync_is_found_and_replayed() -> None:
    b = RankBuilder()
    b.kernel(-100, 0, launch_at=-120)
    for k in range(3):
        _ddp_step(b, k * 10000.0)
    ctx = _ctx(b.build())
    ddp = ctx.summaries[0].facts.ddp_buffer_sync
    assert ddp.broadcasts == 3
    assert ddp.host_us_per_step == pytest.approx(3000)
    rec = _one(local.host_ddp_buffer_sync, ctx)
    assert rec.category is Cause.HOST
    assert any("broadcast_buffers=False" in a for a in rec.actions)
    # Without the 3 ms span the next kernel is issued 3 ms earlier: about 30% of each step.
    assert rec.estimated_savings_pct == pytest.approx(30.0, abs=2.0)


def test_trust_warnings() -> None:
    b = RankBuilder()
    for k in range(3):
        b.step(k + 1, k * 5000.0, (k + 1) * 5000.0)
        b.kernel(k * 5000.0, k * 5000.0 + 4990, launch_at=k * 5000.0 - 20)
    before = " ".join(words(summarize(b.build()).warnings))
    assert "Python stacks" not in before and "aten::empty" not in before
    b.host(10, 20, "train.py(12): step", kind=Kind.PYTHON)
    for i in range(5):
        b.host(100 * i, 100 * i + 30, "aten::empty")
    warns = " ".join(words(summarize(b.build()).warnings))
    assert "Python stacks" in warns and "aten::empty 30 µs" in warns


def test_filtered_trace_warning() -> None:
    # Every one of 120 runtime calls launched a kernel: no event/stream calls at all.
    b = RankBuilder()
    for i in range(120):
        b.kernel(i * 100.0, i * 100.0 + 50, launch_at=i * 100.0 - 20)
    warns = " ".join(words(summarize(b.build()).warnings))
    assert "filtered or sampled" in warns
    b.host(5, 8, "cudaEventRecord", kind=Kind.RUNTIME, correlation=1)
    for i in range(20):
        b.host(i * 100.0 + 9, i * 100.0 + 10, "cudaStreamWaitEvent", kind=Kind.RUNTIME, correlation=2 + i)
    assert "filtered or sampled" not in " ".join(words(summarize(b.build()).warnings))


def test_tiny_window_gives_no_savings() -> None:
    b = RankBuilder()
    b.kernel(0, 10, launch_at=-20)
    b.host(10, 45, "aten::relu")
    b.kernel(50, 60, launch_at=44)
    ctx = _ctx(b.build())
    assert any("only 60 µs" in w for w in words(ctx.summaries[0].warnings))
    rec = _one(local.host_launch, ctx)
    assert rec.estimated_savings_pct == 0.0
    assert any("too little to estimate" in e for e in rec.evidence)


def test_one_step_is_low_confidence() -> None:
    b = RankBuilder()
    b.step(1, 0, 2000)
    b.kernel(0, 1000, launch_at=-20)
    b.host(1000, 1500, "aten::relu")
    b.kernel(1510, 2000, launch_at=1500)
    ctx = _ctx(b.build())
    assert any("only one profiled step" in w for w in words(ctx.summaries[0].warnings))
    rec = _one(local.host_launch, ctx)
    assert rec.estimated_savings_pct > 0
    # Said once for the whole report, under its headline, not in each recommendation.
    assert not any("low confidence" in e for e in rec.evidence)


# --- relations on the real traces -----------------------------------------------------


def test_real_nw4_host_time_sits_in_zero_grad(shared_traces: Path) -> None:
    rep = analyze_paths([shared_traces / "resnet50-nw4"])
    host = next(r for r in rep.recommendations if r.category is Cause.HOST)
    line = next(e for e in host.evidence if "sits under" in e)
    first = line.split("sits under: ")[1].split(";")[0]
    assert first.startswith("Optimizer.zero_grad#SGD.zero_grad")
    assert "launches each" in first  # one zero-fill kernel per gradient
    assert any("set_to_none=True" in a for a in host.actions)


def test_real_a100_host_estimate_and_ddp_buffer_sync(shared_traces: Path) -> None:
    rep = analyze_paths([shared_traces / "a100-2rank-nccl"])
    host = [r for r in rep.recommendations if r.category is Cause.HOST]
    top = host[0]
    assert top.id == "host-overhead"  # launch calls are ~5% of the host's wait
    share = 100 * rep.ranks[0].lost_us[Cause.HOST] / rep.ranks[0].window_us
    assert 30 < top.estimated_savings_pct < share
    assert any("broadcasts its buffers" in e for e in top.evidence)
    ddp = next(r for r in host if r.id == "host-ddp-buffer-sync")
    assert 5 < ddp.estimated_savings_pct < top.estimated_savings_pct
    assert any("aten::empty" in w for w in rep.warnings)


def test_real_hta_other_is_small_and_the_trace_is_flagged(shared_traces: Path) -> None:
    rep = analyze_paths([shared_traces / "hta-sampled-2rank"])
    for r in rep.ranks:
        # Was 31.8% / 26.5%; what stays is idle time no recorded op explains (the trace is
        # filtered: ops and kernels were left out).
        assert 100 * r.lost_us[Cause.OTHER] / r.window_us < 20
    assert any("filtered or sampled" in w for w in rep.warnings)
    host = next(r for r in rep.recommendations if r.category is Cause.HOST)
    assert any("Optimizer.step#Shampoo.step" in e for e in host.evidence)


def test_real_b200_is_inference(shared_traces: Path) -> None:
    rep = analyze_paths([shared_traces / "b200-eager-rank0"])
    host = rep.recommendations[0]
    assert host.category is Cause.HOST
    assert host.estimated_savings_pct > 30  # launch-only replay said 6.9% of 86% host-lost
    assert any("enforce_eager" in a for a in host.actions)
    assert not any("zero_grad" in a for a in host.actions)


def test_real_tiny_window_has_no_local_savings(shared_traces: Path) -> None:
    rep = analyze_paths([shared_traces / "edge-large-integer"])
    assert rep.ranks[0].window_us < 1000
    assert any("under 1 ms" in w for w in rep.warnings)
    assert all(r.estimated_savings_pct == 0 for r in rep.recommendations)  # was comm-overlap 50%


def test_savings_need_a_window_of_a_millisecond() -> None:
    from gpuprof.advice.savings import MIN_WINDOW_US, savings_pct
    from gpuprof.model.report import RankReport, zero_lost

    def rank(window_us: float) -> RankReport:
        return RankReport(
            rank=0, device=None, steps=0, window_us=window_us, compute_us=0.0, lost_us=zero_lost()
        )

    assert savings_pct([rank(MIN_WINDOW_US - 1)], {0: 25.0}) == 0.0
    assert savings_pct([rank(4 * MIN_WINDOW_US)], {0: MIN_WINDOW_US}) == 25.0


def test_real_python_stacks_warning_follows_the_reader_flag(shared_traces: Path) -> None:
    # b200 was recorded with with_stack=True (python_function events, which the reader drops
    # for speed but flags); a100 was not.
    stacks = analyze_paths([shared_traces / "b200-eager-rank0"]).warnings
    plain = analyze_paths([shared_traces / "a100-2rank-nccl"]).warnings
    assert any("Python stacks" in w for w in stacks)
    assert not any("Python stacks" in w for w in plain)


def test_real_timeline_is_not_called_filtered(shared_traces: Path) -> None:
    # Op-level timelines carry framework timers, not launch calls: nothing is missing.
    warnings = analyze_paths([shared_traces / "megatron-pp4-timeline"]).warnings
    assert not any("filtered or sampled" in w for w in warnings)
