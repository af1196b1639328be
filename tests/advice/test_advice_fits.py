"""Advice that fits the trace (issue 29, item 5): warm-up is said to be warm-up, a HIP trace
gets ROCm's names, a compiled model is not told to compile itself, and a trace with no
optimizer is not told to fuse one."""

from __future__ import annotations

from pathlib import Path

import pytest
from rankbuilder import RankBuilder, advice_context

from gpuprof.accounting.summarize import summarize
from gpuprof.advice import local
from gpuprof.model.report import Recommendation
from gpuprof.model.timeline import Kind, RankTrace
from gpuprof.pipeline import analyze_paths

ROOT = Path(__file__).resolve().parents[2]
CUDA_ONLY = ("cudaMalloc", "cudaFree", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING")


def _said(rec: Recommendation) -> str:
    return "\n".join((rec.title, *rec.evidence, *rec.actions))


# -- warm-up ---------------------------------------------------------------------------------


def _warm_up_trace() -> RankTrace:
    """Step 1: 23 one-time cudaMalloc calls, then a 2 s cuDNN autotune (aten::conv2d with
    the GPU mostly idle), then the step's compute; steps 2-4: 200 ms of compute each."""
    b = RankBuilder()
    b.step(1, 0, 2_300_000)  # 23 x 5 ms of allocation, then 2 s of autotuning
    t = 0.0
    for _ in range(23):
        b.host(t, t + 5_000, "cudaMalloc", kind=Kind.RUNTIME)
        t += 5_000
    b.host(t, t + 2_000_000, "aten::conv2d")
    b.kernel(t + 1_000_000, t + 1_001_000, launch_at=t + 999_000)  # one trial kernel
    b.kernel(2_100_000, 2_300_000, launch_at=2_099_990)
    for i in range(3):
        s = 2_300_000 + i * 200_000
        b.step(i + 2, s, s + 200_000)
        b.kernel(s + 5_000, s + 200_000, launch_at=s + 4_990)
    return b.build()


def test_one_time_allocation_in_a_warm_up_step_is_warm_up() -> None:
    trace = _warm_up_trace()
    s = summarize(trace)
    assert s.facts.warmup.alloc_first_step_share == pytest.approx(1.0)
    assert s.facts.warmup.alloc_steps == 1 and s.facts.warmup.first_step_ratio > 10
    (warning,) = [w.text for w in s.warnings if "warm-up" in w.text]
    assert warning.startswith("step 1, the first profiled, takes 2.30 s, 11.5x the median of the others")
    assert "aten::conv2d, takes 2.00 s" in warning
    assert "torch.profiler.schedule(wait=1, warmup=1, active=3)" in warning and "--steps 2:" in warning
    (rec,) = local.memory_allocator(advice_context(trace))
    assert rec.id == "memory-cold-start", rec.id  # not "stop allocator churn"
    text = _said(rec)
    assert "stop allocator churn" not in text and "expandable_segments" not in text
    assert "100% of that allocator time falls in the first profiled step, which takes 11.5x" in text
    assert "one-time warm-up" in text and "aten::conv2d, 2.00 s" in text
    assert "torch.profiler.schedule(wait=" in text


def test_allocation_in_every_step_is_churn_not_warm_up() -> None:
    b = RankBuilder()
    for i in range(3):
        s = i * 1000
        b.step(i + 1, s, s + 1000)
        b.host(s, s + 140, "cudaMalloc", kind=Kind.RUNTIME)
        b.kernel(s + 150, s + 1000, launch_at=s + 145)
    trace = b.build()
    assert not [w for w in summarize(trace).warnings if "warm-up" in w.text]
    (rec,) = local.memory_allocator(advice_context(trace))
    assert rec.id == "memory-allocator"
    assert "calls the device allocator in every one of its 3 steps" in _said(rec)
    assert rec.actions[0].startswith("Re-enable PyTorch's caching allocator: unset PYTORCH_NO_CUDA_MEMORY_CACHING")


# -- ROCm ------------------------------------------------------------------------------------


def test_a_hip_trace_that_allocates_every_step_gets_rocm_advice() -> None:
    report = analyze_paths([ROOT / "sample_traces" / "alloc-churn-rocm"])
    (rec,) = [r for r in report.recommendations if r.id == "memory-allocator"]
    text = _said(rec)
    assert rec.actions[0].startswith("Re-enable PyTorch's caching allocator: unset PYTORCH_NO_HIP_MEMORY_CACHING")
    assert "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True" in text and "hipMalloc/hipFree" in text
    assert "every one of its 2 steps" in text
    for word in CUDA_ONLY:
        assert word not in text, word


@pytest.mark.parametrize("job", ["edge-mi250-minitoy", "mi300-resnet-ckpt-rank0"])
def test_real_rocm_traces_are_told_nothing_in_cuda_allocator_names(job: str, shared_traces: Path) -> None:
    report = analyze_paths([shared_traces / job])
    for rec in report.recommendations:
        for word in CUDA_ONLY:
            assert word not in _said(rec), (rec.id, word)


# -- compiled models, traces without an optimizer -------------------------------------------


def _host_bound(kernel: str = "sm90_gemm_kernel", triton_every: int = 0, optimizer: bool = False) -> RankTrace:
    """Kernels of 20 µs with 200 µs of framework work between launches (host overhead);
    every ``triton_every``-th kernel is Inductor's; ``optimizer``: an Optimizer.step op."""
    b = RankBuilder()
    b.step(1, 0, 50 * 220 + 10)
    b.step(2, 50 * 220 + 10, 100 * 220 + 20)
    for i in range(100):
        t = i * 220 + (10 if i >= 50 else 0)
        b.host(t, t + 195, "aten::layer_norm")
        name = "triton_poi_fused_add_mul_0" if triton_every and i % triton_every == 0 else kernel
        b.kernel(t + 200, t + 220, launch_at=t + 195, name=name)
    if optimizer:
        b.host(49 * 220, 49 * 220 + 190, "Optimizer.step#AdamW.step")
        b.host(99 * 220 + 10, 99 * 220 + 200, "Optimizer.step#AdamW.step")
    return b.build()


def test_a_compiled_model_is_not_told_to_compile_itself() -> None:
    eager = _one_host(_host_bound(triton_every=0, optimizer=True))
    assert any(a.startswith("torch.compile(model)") for a in eager.actions)
    built = _one_host(_host_bound(triton_every=3, optimizer=True))  # a third of the kernels Inductor's
    assert not any("torch.compile(model)" in a for a in built.actions)
    assert built.actions[0].startswith("The model is already compiled")


def test_one_compiled_helper_does_not_make_an_eager_model_compiled(shared_traces: Path) -> None:
    """vLLM's eager B200 trace: two compiled regions, 1 Inductor kernel in 694."""
    report = analyze_paths([shared_traces / "b200-eager-rank0"])
    actions = [a for r in report.recommendations if r.category.value == "host" for a in r.actions]
    assert actions and not any("already compiled" in a for a in actions)


def _one_host(trace: RankTrace) -> Recommendation:
    recs = local.host_launch(advice_context(trace))
    assert len(recs) == 1
    return recs[0]


def test_no_optimizer_advice_without_an_optimizer() -> None:
    none = _one_host(_host_bound())
    assert not any("optimizer" in a.lower() or "fused=True" in a for a in none.actions), none.actions
    adamw = _one_host(_host_bound(optimizer=True))
    assert any("AdamW" in a and "fused=True" in a for a in adamw.actions), adamw.actions
