"""Every scenario, declared in one place: :data:`SCENARIOS`, and what each knob means.

A scenario is a :class:`~gpuprof.simulate.scenario.Scenario`: a function of keyword-only
knobs that returns a :class:`~gpuprof.simulate.plan.Plan` (how many ranks, the program
each rank runs, what the scenario is built to show: the expected top cause and the ranks
where it originates), or such a function with other defaults (a preset), with its
description and the layout it is written in. Knob units are in their names (``_ms``,
``_us``, ``_mb`` for megabytes, ``_gbs`` for gigabytes per second) and their meaning in
:data:`KNOB_HELP`. The functions: single-rank scenarios in
:mod:`~gpuprof.simulate.scenarios_single`, data-parallel ones in
:mod:`~gpuprof.simulate.scenarios_dp`, the pipeline in
:mod:`~gpuprof.simulate.scenarios_pipeline`.

Adding a scenario: write its function (knobs as keyword-only parameters with defaults,
checked with :func:`~gpuprof.simulate.plan.check`; the program from
:func:`~gpuprof.simulate.scenario.each_step`), list it below, describe any new knob in
:data:`KNOB_HELP`.
"""

from __future__ import annotations

from typing import Any

from gpuprof.simulate.plan import Plan
from gpuprof.simulate.scenario import Scenario
from gpuprof.simulate.scenarios_dp import data_parallel, imbalance, rl_post_training, slow_host, straggler
from gpuprof.simulate.scenarios_pipeline import pipeline
from gpuprof.simulate.scenarios_single import (
    alloc_churn,
    healthy,
    input_bound,
    launch_bound,
    memory_pressure,
    sync_heavy,
)
from gpuprof.simulate.schedules import SCHEDULES

__all__ = ["KNOB_HELP", "SCENARIOS", "Plan", "Scenario", "data_parallel"]

# How real Megatron exports record a job (issue 28): batched 1F1B exchanges, the distributed
# optimizer, tied embeddings, sequence parallelism's layernorm all-reduce, the last stage's
# untimed loss all-reduce over its replicas, and Python between the timers.
MEGATRON_EXPORT: dict[str, Any] = {
    "batched_p2p": True,
    "dist_opt": True,
    "tied_embeddings": True,
    "sequence_parallel": True,
    "loss_dp_sync": True,
    "launch_gap_us": 10.0,
}
# DP 4 x PP 4 x TP 4 (the timeline holds TP rank 0 of each position), 5 ms forward per
# microbatch: the shape of the published AR job, for one cause at a time.
DP4_PP4: dict[str, Any] = {**MEGATRON_EXPORT, "stages": 4, "dp": 4, "tp": 4, "stage_ms": 5.0}

KNOB_HELP: dict[str, str] = {
    "ranks": "number of ranks (GPUs), one trace each",
    "steps": "profiled training steps",
    "layers": "transformer layers of the model",
    "layer_ms": "forward time of one layer on one rank, ms (backward takes twice as long)",
    "layer_us": "forward time of one layer, microseconds",
    "op_us": "host (Python + framework) time per operator, microseconds",
    "grad_mb": "gradient bytes all-reduced per step, megabytes",
    "buckets": "DDP gradient buckets per step",
    "link_gbs": "link bandwidth between ranks, gigabytes per second",
    "stages": "pipeline stages (one rank each)",
    "microbatches": "microbatches per step",
    "schedule": "pipeline schedule: " + ", ".join(SCHEDULES),
    "chunks": "model chunks per stage (interleaved schedule only)",
    "stage_ms": "forward time of one microbatch on one stage, ms (backward twice as long)",
    "act_mb": "activation bytes sent between stages per microbatch, megabytes",
    "slow_stage": "pipeline stage with more work than the others, on every replica (-1: none)",
    "slow_rank": "rank whose GPU computes slower (pipeline: -1 for none)",
    "slowdown": "compute time factor of the slow rank or stage",
    "replica_spread": "data-parallel replica d computes spread * d / (dp - 1) slower (the last one the most)",
    "annotate": "mark each microbatch with forward_step / backward_step ranges (false: only NCCL send/recv show them)",
    "dist_opt": "distributed optimizer: reduce-scatter gradients and all-gather parameters instead of one all-reduce",
    "dp": "data-parallel replicas of the pipeline",
    "tp": "tensor-parallel size of the job; the megatron layout holds TP rank 0 of each position",
    "seq_cv": "coefficient of variation of each microbatch's work (its sequence lengths), drawn per replica, step and microbatch",
    "tied_embeddings": "all-reduce the tied embeddings' gradients between the first and last stage after the pipeline",
    "batched_p2p": "steady-state 1F1B exchanges as one call both stages wait for (Megatron's batched send/receive; megatron layout)",
    "sequence_parallel": "with tp > 1: all-reduce the layernorm gradients over the tensor-parallel group after the pipeline (layernorm-grads-all-reduce)",
    "loss_dp_sync": "the last stage all-reduces the step's loss over its data-parallel group after the pipeline, untimed (a late replica holds the others' last stage)",
    "launch_gap_us": "Python between Megatron's timers: before each compute op the host synchronizes the device and runs this long before its first launch, microseconds",
    "slow_link": "pipeline link between stage s and s+1 whose transfers are slow, on one replica (-1: none)",
    "slow_link_replica": "data-parallel replica of the slow pipeline link",
    "link_slowdown": "transfer-time factor of the slow pipeline link",
    "slow_dp_group": "pipeline stage whose data-parallel collectives are slow (-1: none)",
    "group_slowdown": "transfer-time factor (1 / bandwidth) of the slow stage's data-parallel collectives",
    "backward_op_us": "host time per backward operator (autograd's C++ engine), microseconds",
    "slow_host_rank": "rank whose host (Python, framework, launches) is slower (-1: none)",
    "host_slowdown": "time factor of the slow rank's host work",
    "host_cores": "CPU cores the training process and its DataLoader workers share (0: as many as they need)",
    "loader_workers": "DataLoader worker processes once the loader keeps up (the no_dataloader job); each takes a core while it produces a batch",
    "seq_min": "shortest sequence length in a step's per-rank batches",
    "seq_max": "longest sequence length in a step's per-rank batches",
    "batch_ms": "time the DataLoader needs to produce one batch, ms",
    "items_per_layer": "`.item()` calls per layer in the forward pass",
    "python_ms": "Python run on the host after each `.item()` (acting on the value) before the next launch, ms",
    "frees_per_layer": "operators per layer that free a temporary (hipFree/cudaFree, synchronizing) inside",
    "free_us": "host time of one free once the device is idle, microseconds",
    "malloc_us": "host time of one device allocation, microseconds",
    "flush": "empty the caching allocator each step (cudaFree + cudaMalloc retries)",
    "mallocs": "cudaMalloc calls per step after the flush",
    "offload_mb": "activation bytes offloaded to host per layer and fetched back in backward, megabytes",
    "pageable_mb": "input bytes copied from pageable host memory per step, megabytes",
    "tokens_min": "shortest rollout per rank per step, generated tokens",
    "tokens_max": "longest rollout per rank per step, generated tokens",
    "decode_us": "device time of one decode step of one layer, microseconds",
    "reward_ms": "host time scoring rollouts (device idle), ms",
}


# The scenarios, in the order `gpuprof simulate --list` shows them.
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(healthy),
        Scenario(pipeline),
        Scenario(
            data_parallel,
            name="dp_exposed",
            presets={"link_gbs": 5.0},
            doc="Data parallel over slow links (5 GB/s): the gradient all-reduce is exposed.",
        ),
        Scenario(
            data_parallel,
            name="dp_overlapped",
            presets={"link_gbs": 200.0},
            doc="Data parallel over NVLink-class links: the all-reduce hides behind backward.",
        ),
        Scenario(straggler),
        Scenario(slow_host),
        Scenario(imbalance),
        Scenario(memory_pressure),
        Scenario(input_bound),
        Scenario(
            input_bound,
            name="dataloader_contention",
            presets={"layer_ms": 0.15, "op_us": 24.0, "batch_ms": 4.0, "host_cores": 1, "loader_workers": 2},
            doc="A host-heavy step that waits for its DataLoader; the fix (more workers) makes the workers "
            "compete with the training process for its one core, so its host work slows down.",
        ),
        Scenario(sync_heavy),
        Scenario(launch_bound),
        Scenario(alloc_churn),
        Scenario(rl_post_training),
        # The two large 3D-parallel jobs of issue 19, as real exports record them.
        Scenario(
            pipeline,
            name="megatron_slow_worker",
            layout="megatron",
            presets={
                **MEGATRON_EXPORT,
                "stages": 4,
                "dp": 4,
                "tp": 4,
                "microbatches": 32,
                "slow_rank": 0,
                "slowdown": 2.5,
            },
            doc="PP 4 x DP 4 x TP 4 (the timeline holds TP rank 0 of each position), 32 microbatches: one "
            "worker (DP 0, stage 0) computes 2.5x slower; the other replicas finish early and wait, "
            "untimed, before the end-of-step collectives.",
        ),
        Scenario(
            pipeline,
            name="megatron_uneven_data",
            layout="megatron",
            presets={
                **MEGATRON_EXPORT,
                "stages": 2,
                "dp": 32,
                "microbatches": 8,
                "steps": 3,
                "seq_cv": 0.3,
                "slow_stage": 1,
                "slowdown": 1.5,
            },
            doc="PP 2 x DP 32: sequence lengths vary from batch to batch (each microbatch's work, CV 0.3), "
            "so the slowest replica changes every step, and the last stage (loss, head) has 1.5x the "
            "work of the first.",
        ),
        # One cause each, on the shape of the published DP 4 x PP 4 job (issue 28).
        Scenario(
            pipeline,
            name="megatron_slow_stage",
            layout="megatron",
            presets={**DP4_PP4, "microbatches": 32, "slow_stage": 1, "slowdown": 1.5},
            doc="PP 4 x DP 4 x TP 4, 32 microbatches: stage 1 has 1.5x the layers' work of the others on "
            "every replica (each GPU at its speed); the fix is balanced stages.",
        ),
        Scenario(
            pipeline,
            name="megatron_slow_link",
            layout="megatron",
            presets={
                **DP4_PP4,
                "microbatches": 32,
                "act_mb": 24.0,
                "link_gbs": 50.0,
                "slow_link": 1,
                "slow_link_replica": 0,
                "link_slowdown": 10.0,
            },
            doc="PP 4 x DP 4 x TP 4: the pipeline link between stage 1 and stage 2 of replica 0 (a bad NIC "
            "or cable) moves activations and gradients 10x slower than the same link of the other replicas.",
        ),
        Scenario(
            pipeline,
            name="megatron_slow_dp_group",
            layout="megatron",
            presets={
                **DP4_PP4,
                "microbatches": 16,
                "act_mb": 8.0,
                "link_gbs": 50.0,
                "grad_mb": 400.0,
                "slow_dp_group": 1,
                "group_slowdown": 6.0,
            },
            doc="PP 4 x DP 4 x TP 4, distributed optimizer: stage 1's data-parallel collectives (gradient "
            "reduce-scatter, parameter all-gather over its 4 replicas) run at 1/6 of the bandwidth of the "
            "other stages' groups.",
        ),
    )
}
