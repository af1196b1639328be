"""Phrases of the local findings (:mod:`gpuprof.advice.local`): the lines every local
finding shares, and those of a host that keeps the GPU waiting for input or in syncs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuprof.advice.phrasebook.book import phrase, specs, templates
from gpuprof.advice.phrasebook.unit import PER_STEP, UNIT_WORDS, Unit, UnitWords
from gpuprof.util.phrases import duration, pct_range

# What the GPU idled for, by finding (the idle line's end).
_IDLE_WHAT = {
    "dataloader-starvation": "while the host waited for the next batch in DataLoader.__next__",
    "sync-host-blocking": "after the host blocked waiting for it",
    "memory-pageable-copies": "in copies from or to pageable (not pinned) host memory",
    "memory-exposed-copies": "in copies and memsets that no compute overlapped",
    "memory-allocator": "while the host was in device allocator calls (cudaMalloc/cudaFree and kin)",
    "memory-allocator-rocm": "while the host was in device allocator calls (hipMalloc/hipFree and kin)",
    "host-launch": "waiting for the host to launch the next kernel",
    "host-ddp-buffer-sync": "while DistributedDataParallel broadcast its buffers at the start of the forward",
}
# What a what-if frees, as the range of a host saving names it.
_FREED = {
    "no_dataloader": "DataLoader wait",
    "no_sync": "blocking calls",
    "no_allocator": "allocator calls",
    "free_launch_calls": "kernel launch calls",
    "free_launches": "framework operators that launch kernels",
    "no_ddp_buffer_sync": "DDP buffer broadcast",
    "pinned_copies": "pageable copies",
    "hidden_copies": "exposed copies",
}
# What the upper end of a saving assumes, by the what-ifs replayed with the fix.
_UPPER_ASSUMES = {
    ("free_launches",): "the framework operators' host time gone as well, the most the host can speed up",
}
# Where the lost time of a cause sits, as the line of its top ops calls it.
_OPS_WHAT = {
    "sync": "time the GPU idled after blocking calls",
    "host": "time the GPU waited for the host",
}
specs({"freed": _FREED.__getitem__, "assumes": _UPPER_ASSUMES.__getitem__})


@phrase("local.idle")
def idle(
    finding: str, ranks: int, worst_rank: int, per_step_us: float, stepped: bool, share_pct: float, low_pct: float,
    high_pct: float, unit: UnitWords = PER_STEP,
) -> str:
    """How long the GPU idled on the worst rank, and the spread over the ranks; per step
    where its ranks have steps and the report measures per step, else in the window."""
    where = f"rank {worst_rank}" if ranks == 1 else f"{ranks} ranks (worst: rank {worst_rank})"
    said = unit if stepped else UNIT_WORDS[Unit.WINDOW]
    spread = f"; {pct_range(low_pct, high_pct, 1)} across those ranks" if ranks > 1 else ""
    return (
        f"On {where} the GPU idled {duration(per_step_us)} {said.per} ({share_pct:.1f}% {said.of_the}) "
        f"{_IDLE_WHAT[finding]}{spread}."
    )


@phrase("local.ops")
def ops(rank: int, cause: str, ops: Sequence[Mapping[str, Any]], unit: UnitWords = PER_STEP) -> str:
    """The ops the lost time sits under: time (per step where its rank has steps, in the
    report's ``unit``), calls, launches per call, the inner op."""
    parts = []
    for o in ops:
        n = o["calls"]
        text = o["op"] + " " + duration(o["us"]) + (unit.slash if o["per_step"] else "")
        text += f", {n} call{'s' if n != 1 else ''}" if n else ""
        if o["launches_per_call"] is not None:
            text += f", {o['launches_per_call']:,.0f} kernel launches" + (" each" if n != 1 else "")
        if o["inner_op"]:
            text += (
                f" (of which {o['inner_op']} {duration(o['inner_us'])}{unit.slash if o['stepped'] else ''}; "
                f"its longest call took {duration(o['inner_longest_us'])} on the host)"
            )
        parts.append(text)
    return f"On rank {rank} the {_OPS_WHAT[cause]} sits under: " + "; ".join(parts) + "."


@phrase("dataloader.cores_range")
def cores_range(low_pct: float, high_pct: float, pct: float, load_us: float, in_process: bool, unit: UnitWords = PER_STEP) -> str:
    """The range of the DataLoader fix over the host's free cores (see
    :func:`gpuprof.advice.local.inputs._with_cores_range`)."""
    gone = "the waits gone and the loader's host work out of the training process" if in_process else "the waits gone"
    return (
        f"How much of this the workers give back depends on the host's free cores, which one trace cannot "
        f"show: {high_pct:.1f}% with a free core for every worker ({gone}); {low_pct:.1f}% if they share the "
        f"training process's cores (its own host work then grows by up to the {duration(load_us)} of loading {unit.per} "
        f"they take over). Estimate: the middle, {pct:.1f}%. Count the host's cores against num_workers + 1 "
        f"per GPU (nproc, and what else runs there): with enough free, expect the upper end."
    )


@phrase("sync.calls")
def sync_calls(rank: int, calls: Sequence[tuple[str, int]], steps: int, unit: UnitWords = PER_STEP) -> str:
    """Each blocking call's count on ``rank``: per step where it has steps (in the report's ``unit``)."""
    per = [f"{k} {n / steps:.1f}{unit.slash}" if steps > 0 else f"{k} {n}" for k, n in calls]
    return f"Rank {rank} blocking calls: " + ", ".join(per) + "."


templates({
    "local.model_range": (
        "Model: the {whatif:freed} cost nothing on the host, as CUDA graph capture or "
        "torch.compile achieve; the Python between them is kept. Estimated saving between "
        "{low_pct:.1f}% (only the {lower:freed} free) and {pct:.1f}%."
    ),
    "local.estimate_middle": (
        "Estimate {pct:.1f}%, the middle of {low_pct:.1f}% (the host as measured) and {high_pct:.1f}% "
        "({upper:assumes}): the fix speeds up the host too, by an amount one trace cannot show."
    ),
    # the DataLoader
    "title.dataloader-starvation": "The GPU waits for input data: speed up the DataLoader",
    "dataloader.calls": (
        "On rank {rank} each DataLoader.__next__ call took {mean_us:dur} on the host ({calls} call{calls:s} in the window)."
    ),
    "dataloader.in_process": "The DataLoader runs in the training process (num_workers=0: _SingleProcessDataLoaderIter).",
    "dataloader.replay_in_process": (
        "The replay keeps the host's measured speed between launches. Host ops run slow while the "
        "DataLoader works in-process (its tensor work and intra-op threads compete with the training "
        "loop for the cores); loading in worker processes speeds them up too."
    ),
    "dataloader.start_workers": (
        "Load in worker processes: DataLoader(..., num_workers=N) with N up to the CPU cores per GPU."
    ),
    "dataloader.more_workers": (
        "Raise DataLoader num_workers (up to the CPU cores per GPU) and prefetch_factor (default 2)."
    ),
    "dataloader.actions": (
        "Keep workers alive across epochs: persistent_workers=True.",
        "Use pin_memory=True and .to(device, non_blocking=True) so the copy overlaps compute.",
        (
            "If workers are already saturated, move decoding/augmentation to the GPU (e.g. NVIDIA DALI, "
            "torchvision.transforms.v2 on CUDA tensors) or pre-process the data set offline."
        ),
    ),
    # syncs
    "title.sync-host-blocking": "The host blocks on the GPU inside the loop: remove the syncs",
    "sync.scalar_reads": (
        "Remove .item() / .cpu() / float(tensor) / print(loss) from the training loop: accumulate "
        "metrics on the GPU (e.g. running_loss += loss.detach()) and read them every N steps."
    ),
    "sync.actions": (
        "Drop explicit torch.cuda.synchronize() calls outside of timing code.",
        (
            "Avoid data-dependent host decisions on GPU values (if loss > x, torch.nonzero, masked indexing); "
            "find them with torch.cuda.set_sync_debug_mode('warn')."
        ),
        "Make device-to-host copies non_blocking=True into pinned memory and consume them a step later.",
    ),
})
