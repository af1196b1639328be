"""Phrases of the NVML sample findings (:mod:`gpuprof.advice.samples`): idle phases,
memory near capacity, throttled clocks, lost GPUs."""

from __future__ import annotations

from collections.abc import Sequence

from gpuprof.advice.phrasebook.book import specs, templates


def _gpus(gpus: Sequence[int]) -> str:
    return "GPU " + ", ".join(str(g) for g in gpus) if len(gpus) <= 4 else f"{len(gpus)} GPUs"


_CLOCK = "SM clock {loss} lower while the reason was set than in unthrottled busy samples"
specs({"gpus": _gpus})
templates({
    "title.samples-periodic-idle": (
        "GPUs idle {idle_pct:.0f}% of the run in periodic phases of ~{mean_idle_s:.0f} s "
        "every ~{period_s:.0f} s: overlap rollout generation (or evaluation) with training"
    ),
    "samples.periodic": (
        "{phases} idle phases (all GPUs below 5% utilization), mean {mean_idle_s:.1f} s, "
        "period {period_s:.1f} s, duty cycle {duty_cycle_pct:.0f}% idle"
    ),
    "samples.run": "run length {run_s:.0f} s sampled every {interval_ms:.0f} ms",
    "samples.periodic_actions": (
        (
            "RL post-training: generate rollouts on separate GPUs or asynchronously (one step off-policy) "
            "so the trainer GPUs never wait for generation"
        ),
        "periodic evaluation: evaluate less often or on fewer batches, or on a separate worker",
        "periodic checkpointing: save asynchronously (torch.distributed.checkpoint.async_save)",
    ),
    "title.samples-idle-phases": (
        "GPUs idle {idle_pct:.0f}% of the run in {phases} phase(s), longest {longest_s:.0f} s "
        "at {at_s:.0f} s: find what the job does then"
    ),
    "samples.idle_phase": "idle {start_s:.0f}-{end_s:.0f} s ({length_s:.0f} s)",
    "samples.idle_actions": (
        "profile the idle phase (gpuprof run --profile-wait N) or add logging around evaluation, "
        "checkpointing and data preparation"
    ),
    "title.samples-startup-idle": (
        "GPUs idle for the first {length_s:.0f} s (startup: loading, compilation, data preparation)"
    ),
    "samples.startup": "no GPU above 5% utilization until {end_s:.0f} s of a {run_s:.0f} s run",
    "samples.startup_actions": "load checkpoints and datasets lazily or in parallel; cache torch.compile artifacts",
    "title.samples-memory-near-capacity": (
        "GPU memory peaked at {peak_pct:.0f}% of capacity on {gpus:gpus}: one larger batch away from OOM"
    ),
    "samples.memory_gpu": "GPU {gpu}: peak {peak_pct:.1f}%, {near_pct:.0f}% of polls at >= 95%",
    "samples.memory_actions": (
        "check the step records for allocator retries (torch.cuda.memory_stats num_alloc_retries)",
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to cut fragmentation",
        "use activation checkpointing or a smaller micro-batch if retries or OOMs appear",
    ),
    "title.samples-throttle": (
        "GPU clocks slowed by {reason:words} in {busy_pct:.0f}% of busy samples on {gpus:gpus}: check power "
        "limits and cooling"
    ),
    "samples.clock_loss": _CLOCK.replace("{loss}", "{loss_pct:.0f}%"),
    "samples.clock_loss_unknown": _CLOCK.replace("{loss}", "N/A"),
    "samples.throttle_actions": (
        "compare nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE with the GPU's rated limits",
        "ask the cluster admins about power capping and airflow for these nodes",
    ),
    "title.samples-gpu-lost": "{gpus:gpus} fell off the bus during the run (NVML: GPU is lost)",
    "samples.lost_at": "GPU {gpu} lost at {at_s:.0f} s",
    "samples.lost_actions": "check `dmesg` for Xid errors and have the node drained and inspected",
})
