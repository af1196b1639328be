"""The simulated scenarios: one function per kind of waste, taking real knobs.

Each function returns a :class:`~gpuprof.simulate.plan.Plan`: how many ranks, the program
each rank runs, and what the scenario is built to show (the expected top cause and the
ranks where it originates). Knobs are keyword arguments with defaults; their units are in
their names (``_ms``, ``_us``, ``_mb`` for megabytes, ``_gbs`` for gigabytes per second)
and their meaning in :data:`KNOB_HELP`. Single-rank scenarios live in
:mod:`~gpuprof.simulate.scenarios_single`, the others in
:mod:`~gpuprof.simulate.scenarios_parallel`.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuprof.simulate.plan import Plan
from gpuprof.simulate.scenarios_parallel import (
    data_parallel,
    dp_exposed,
    dp_overlapped,
    imbalance,
    megatron_slow_worker,
    megatron_uneven_data,
    pipeline,
    rl_post_training,
    straggler,
)
from gpuprof.simulate.scenarios_single import (
    alloc_churn,
    healthy,
    input_bound,
    launch_bound,
    memory_pressure,
    sync_heavy,
)
from gpuprof.simulate.schedules import SCHEDULES

__all__ = ["KNOB_HELP", "SCENARIOS", "Plan", "data_parallel"]

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
    "dp": "data-parallel replicas of the pipeline (ranks = stages x dp)",
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


SCENARIOS: dict[str, Callable[..., Plan]] = {
    "healthy": healthy,
    "pipeline": pipeline,
    "dp_exposed": dp_exposed,
    "dp_overlapped": dp_overlapped,
    "straggler": straggler,
    "imbalance": imbalance,
    "memory_pressure": memory_pressure,
    "input_bound": input_bound,
    "sync_heavy": sync_heavy,
    "launch_bound": launch_bound,
    "alloc_churn": alloc_churn,
    "rl_post_training": rl_post_training,
    "megatron_slow_worker": megatron_slow_worker,
    "megatron_uneven_data": megatron_uneven_data,
}
