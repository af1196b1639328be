"""Phrases of the local memory findings (:mod:`gpuprof.advice.local.memory`): pageable and
exposed copies, the device allocator, a trace that opens with set-up."""

from __future__ import annotations

from collections.abc import Sequence

from gpuprof.advice.phrasebook.book import phrase, specs, templates
from gpuprof.util.phrases import duration


def _named_durations(parts: Sequence[tuple[str, float]]) -> str:
    return ", ".join(f"{k} {duration(v)}" for k, v in parts)


def _times(calls: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{k} x{n}" for k, n in calls)


specs({"named_durations": _named_durations, "times": _times})
templates({
    "title.memory-pageable-copies": "Host-device copies use pageable memory and stall the GPU: pin memory",
    "memory.pageable_copies": "Rank {rank}: {copies} pageable copies in the window; they cannot overlap compute.",
    "memory.pageable_copies_sized": (
        "Rank {rank}: {copies} pageable copies, {size_mib:.0f} MiB in the window; they cannot overlap compute."
    ),
    "memory.pageable_actions": (
        "Pin host buffers: DataLoader(..., pin_memory=True), or tensor.pin_memory() for buffers you reuse.",
        "Copy with .to(device, non_blocking=True) so the transfer runs beside compute.",
        "Prefetch the next batch to the GPU on a side stream while the current step runs.",
    ),
    "title.memory-exposed-copies": "Memory transfers run with nothing beside them: overlap or remove them",
    "memory.exposed_by_kind": "Rank {rank} exposed transfer time {unit.per} by direction: {kinds:named_durations}.",
    "memory.exposed_by_kind_window": "Rank {rank} exposed transfer time by direction: {kinds:named_durations}.",
    "memory.exposed_actions": (
        (
            "Overlap transfers with compute: issue them non_blocking=True from pinned memory on a side stream, "
            "one step ahead."
        ),
        (
            "Keep tensors on the GPU across steps instead of moving them back and forth (CPU offload, "
            "metrics, masks built on the CPU)."
        ),
        (
            "For device-to-device copies, avoid needless .contiguous(), torch.cat of large buffers, or "
            "dtype conversions in the hot loop."
        ),
    ),
    "title.memory-allocator": "The GPU waits on memory allocation and release: stop allocator churn",
    "memory.allocator_calls": "Rank {rank} allocator calls: {calls:times}, {total_us:dur} in total.",
    "memory.peak": (
        "Memory peaked at {peak_gib:.1f} GiB of {capacity_gib:.1f} GiB ({share_pct:.0f}%): "
        "the caching allocator frees and retries when it runs out."
    ),
    "memory.every_step": (
        "Rank {rank} calls the device allocator in every one of its {steps} steps: the caching allocator is off "
        "or emptied each step, not only short of memory."
    ),
    "memory.lower_peak_inference": (
        "Lower peak memory: a smaller KV-cache budget or maximum batch (vLLM: gpu_memory_utilization, "
        "max_num_seqs), quantized weights or KV cache, or more tensor parallelism."
    ),
    "memory.lower_peak": (
        "Lower peak memory: activation checkpointing, a smaller micro-batch with gradient accumulation, "
        "bf16/fp16 autocast, or sharding optimizer state (FSDP/ZeRO)."
    ),
    "title.memory-cold-start": (
        "The trace opens with allocator and library set-up (a cold start): profile steady-state steps"
    ),
    "memory.cold_start": (
        "{share_pct:.0f}% of that allocator time comes before the first compute kernel, in a trace "
        "without step markers: the trace opens with the process's set-up (allocations, library handles), a "
        "cold start, not a loop that allocates every step."
    ),
    "memory.cold_start_actions": (
        (
            "Start the profiler after a few iterations (torch.profiler.schedule(wait=5, warmup=2, active=3), or "
            "gpuprof run's --profile-wait) so the trace shows the steady state, and mark the steps "
            "(prof.step() each iteration) so that gpuprof can tell set-up from training."
        ),
        (
            "If start-up time itself matters (short jobs, serving): warm the allocator and load kernels once "
            "before timing (a dummy batch), and cache compiled artifacts."
        ),
    ),
})


_STABLE_SHAPES = "Keep tensor shapes stable (pad or bucket variable sequence lengths) so cached blocks get reused."


@phrase("memory.allocator_actions")
def allocator_actions(every: bool) -> tuple[str, ...]:
    """What stops allocator churn on CUDA: the caching allocator first when every step
    allocates."""
    reenable = (
        "Re-enable PyTorch's caching allocator: unset PYTORCH_NO_CUDA_MEMORY_CACHING (with it set, every tensor "
        "is a cudaMalloc and a cudaFree, and cudaFree synchronizes the device)."
    )
    first = (reenable,) if every else ()
    return (
        *first,
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to cut fragmentation and cudaMalloc retries.",
        "Remove torch.cuda.empty_cache() from the training loop (cudaFree synchronizes the device).",
        _STABLE_SHAPES,
    )


@phrase("memory.allocator_actions_rocm")
def allocator_actions_rocm(every: bool) -> tuple[str, ...]:
    """The same in ROCm's names (the Python API keeps its torch.cuda names on ROCm)."""
    reenable = (
        "Re-enable PyTorch's caching allocator: unset PYTORCH_NO_HIP_MEMORY_CACHING (with it set, every tensor "
        "is a hipMalloc and a hipFree, and hipFree synchronizes the device)."
    )
    first = (reenable,) if every else ()
    return (
        *first,
        "Set PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to cut fragmentation and hipMalloc retries.",
        (
            "Remove torch.cuda.empty_cache() from the training loop (on ROCm too: it calls hipFree, which "
            "synchronizes the device)."
        ),
        _STABLE_SHAPES,
    )


@phrase("memory.warm_up")
def warm_up(share_pct: float, ratio: float, op: str | None, op_us: float | None) -> str:
    """Allocator time in a first step that is warm-up."""
    longest = f" (its longest op: {op}, {duration(op_us)})" if op and op_us else ""
    return (
        f"{share_pct:.0f}% of that allocator time falls in the first profiled step, which takes {ratio:.1f}x the "
        f"median of the others{longest}: one-time warm-up (the caching allocator's first blocks, cuDNN "
        "autotuning, compilation), not a loop that allocates every step."
    )
