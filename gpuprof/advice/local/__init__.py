"""Advice from what each rank does on its own: input pipeline, syncs, memory, launches.

One advisor per finding; ids are prefixed by their cause so that the cross-rank advisors
(:mod:`gpuprof.advice.distributed`) can use their own without clashing. Exposed
communication is advised there (``comm-overlap``, ``exposed-communication``), single rank
included, so it has no advisor here.

| id | cause | when |
|---|---|---|
| ``dataloader-starvation`` | dataloader | the GPU idles while the host is in DataLoader ``__next__`` |
| ``sync-host-blocking`` | sync | the GPU idles after the host blocked on it (``.item()``, syncs) |
| ``memory-pageable-copies`` | memory | exposed copies from/to pageable host memory |
| ``memory-exposed-copies`` | memory | other copies / memsets nothing overlaps |
| ``memory-allocator`` | memory | the GPU waits on ``cudaMalloc`` / ``cudaFree`` (often near capacity) |
| ``host-launch-bound`` | host | launches arrive late and the host spends >= 50% of the device's wait inside launch calls; many kernels (>= 2/ms), >= 30% shorter than their launch |
| ``host-overhead`` | host | launches arrive late otherwise: framework / Python work between the launches |
| ``host-ddp-buffer-sync`` | host | the GPU idles while ``DistributedDataParallel.forward`` broadcasts its buffers |

The host findings name where the host time sits (the top enclosing ops, facts
``lost_by_op``), and fit the workload: inference (facts ``workload``) gets CUDA-graph
advice (vLLM: no ``enforce_eager``), not optimizer or ``zero_grad`` advice.

A finding is reported for the ranks where it costs at least :data:`MIN_SHARE` of the window;
``ranks`` are the ranks where the cause originates.

``estimated_savings_pct`` comes from :mod:`gpuprof.advice.savings` (job step time is set by
the slowest rank). For the host-side findings it uses the what-if replay of
:mod:`gpuprof.job.whatifs` where the summary has one (``whatif_step_times_us``): the
time a rank would save is its replayed step time without the cause subtracted from the
replayed step time with it, so a stall that also leaves the device to run launch-bound
afterwards saves more than its own share, and one the device was busy through saves
nothing. Which what-if each finding uses:

| id | what-if |
|---|---|
| ``dataloader-starvation`` | ``dataloader``: input ready when asked for |
| ``sync-host-blocking`` | ``sync``: no blocking calls |
| ``memory-allocator`` | ``allocator``: allocator calls cost nothing |
| ``host-launch-bound`` / ``host-overhead`` | ``operators``: framework operators that launch kernels cost
  nothing on the host (CUDA graphs / ``torch.compile``; Python between them kept); the ``launch`` replay
  (only the launch calls free) is given as the lower end of the range. Where the rank's DataLoader runs
  in-process and stalls it, the ``launch`` replay alone: the in-process loader slows every host op, and
  the operators replay would count time the DataLoader fix removes |
| ``host-ddp-buffer-sync`` | ``ddp_buffers``: DDP's buffer broadcast removed |

Ranks without a replay (launches not in the trace) fall back to removing the cause's
attributed time. The fix is assumed to apply on every rank that has the cause. No saving is
estimated from a window under 1 ms (:data:`gpuprof.advice.savings.MIN_WINDOW_US`).

The advisors live by family (``inputs``: DataLoader and syncs; ``memory``; ``host``) beside
what they share (``hits``); each returns findings, which the phrasebook words
(:mod:`gpuprof.advice.phrasebook`). Importing this package registers them all.
"""

from __future__ import annotations

from gpuprof.advice.local.hits import MIN_SHARE
from gpuprof.advice.local.host import (
    LAUNCH_BOUND_CALL_SHARE,
    LAUNCH_BOUND_RATE_PER_MS,
    LAUNCH_BOUND_TINY_SHARE,
    LOADER_CONTENTION_SHARE,
    host_ddp_buffer_sync,
    host_launch,
)
from gpuprof.advice.local.inputs import dataloader_starvation, sync_host_blocking
from gpuprof.advice.local.memory import (
    COLD_START_SHARE,
    memory_allocator,
    memory_exposed_copies,
    memory_pageable_copies,
)

__all__ = [
    "COLD_START_SHARE",
    "LAUNCH_BOUND_CALL_SHARE",
    "LAUNCH_BOUND_RATE_PER_MS",
    "LAUNCH_BOUND_TINY_SHARE",
    "LOADER_CONTENTION_SHARE",
    "MIN_SHARE",
    "dataloader_starvation",
    "host_ddp_buffer_sync",
    "host_launch",
    "memory_allocator",
    "memory_exposed_copies",
    "memory_pageable_copies",
    "sync_host_blocking",
]
