"""The what-if vocabulary: fixes the simulator can apply to a job, named as the analyzer names them.

A *fix* changes how the simulated job runs; simulating the fixed job and comparing its step
time with the original's gives the what-if's true saving (:mod:`gpuprof.simulate.whatif`).
The names are shared with the analyzer's what-if replay, so that each recommendation's
estimate can be checked against the simulated truth of the same what-if.

Engine-level fixes act in :mod:`gpuprof.simulate.host`, :mod:`gpuprof.simulate.rank` and
:mod:`gpuprof.simulate.comm` on every scenario; job-level fixes (:data:`JOB_FIXES`) change
what a scenario's ranks compute, how fast one link, collective group or host runs, and are
applied by the scenarios that have such work. Every fix only shortens work or removes waits:
the ``peer_median_*`` fixes bring a rank, link or group down to its peers' median and never
slow one that is already faster (``no_variation``, the bound, sets everything to its mean or
median). A fix
never changes how many random draws a rank makes (a removed call still draws its jitter),
except ``double_microbatches``, which runs more operations; each rank draws from streams of
its own per purpose and step, so that even then only that step's draws of that purpose move.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

NO_DATALOADER = "no_dataloader"
NO_SYNC = "no_sync"
FREE_LAUNCHES = "free_launches"
FREE_HOST = "free_host"
PEER_MEDIAN_COMPUTE = "peer_median_compute"
BALANCED_STAGES = "balanced_stages"
DOUBLE_MICROBATCHES = "double_microbatches"
OVERLAP_COLLECTIVES = "overlap_collectives"
DOUBLE_BANDWIDTH = "double_bandwidth"
NO_ALLOCATOR = "no_allocator"
BALANCED_BATCHES = "balanced_batches"
PEER_MEDIAN_LINK = "peer_median_link"
PEER_MEDIAN_COLLECTIVE = "peer_median_collective"
PEER_MEDIAN_HOST = "peer_median_host"
NO_VARIATION = "no_variation"
ALL = "all"

# What each fix does to the simulated job (also the text of ``gpuprof simulate --list``).
WHATIF_HELP: dict[str, str] = {
    NO_DATALOADER: "the DataLoader wait costs nothing: the next batch is ready when asked for",
    NO_SYNC: "no blocking host-device syncs: cudaStreamSynchronize / cudaDeviceSynchronize are "
    "not called and blocking copies (.item(), pageable memory) become non-blocking; "
    "all other host work stays",
    FREE_LAUNCHES: "CUDA graphs / torch.compile: framework operators (their dispatch overhead, "
    "the host time inside them) and kernel, copy and memset launch calls cost no host time; "
    "Python between operators, data waits, syncs and allocator calls stay",
    FREE_HOST: "all the host's own work costs nothing: Python between operators, framework "
    "operators and launch calls; DataLoader waits, syncs, allocator calls and blocking copies stay "
    "(the upper bound of any host-side speed-up)",
    PEER_MEDIAN_COMPUTE: "every rank's compute runs no slower than the median speed of its other "
    "same-work peers (the same pipeline stage on the data-parallel replicas, or the data-parallel "
    "group; the median over the group leaving the rank out, per step where the work varies per step); "
    "a rank faster than that median keeps its speed",
    BALANCED_STAGES: "pipeline work spread evenly over the stages: each stage's work per "
    "microbatch is the mean over stages (each GPU keeps its own speed)",
    DOUBLE_MICROBATCHES: "twice the microbatches per step, each half the work and half the "
    "activation bytes (same global batch)",
    OVERLAP_COLLECTIVES: "collectives fully hidden: their transfer takes no time, so nothing waits "
    "for it; waiting for a late rank still counts (point-to-point transfers unchanged)",
    DOUBLE_BANDWIDTH: "every collective and point-to-point transfer takes half as long "
    "(its whole transfer time, fixed latency included)",
    NO_ALLOCATOR: "device allocator calls (cudaMalloc/cudaFree/hipMalloc/hipFree, cache "
    "flushes, retries) cost nothing and no longer synchronize",
    BALANCED_BATCHES: "the data balanced per step (sequence packing, length bucketing): every "
    "microbatch of every data-parallel replica carries the step's mean work; each GPU keeps its "
    "speed and each stage its layers",
    PEER_MEDIAN_LINK: "every pipeline link's point-to-point transfers (both directions between "
    "stage s and s+1 of one data-parallel replica) run no slower than the median speed of the same "
    "stage boundary on the other replicas (per byte); a link already that fast keeps its speed",
    PEER_MEDIAN_COLLECTIVE: "every data-parallel collective group's transfers (a stage's "
    "grads-reduce-scatter, params-all-gather or gradient all-reduce over its replicas) run no slower "
    "than the median speed, per byte, of the same collective on the other stages' groups; the wait "
    "for a late member stays",
    PEER_MEDIAN_HOST: "every rank's own host work (Python between operators, framework operators, "
    "launch calls: what free_host removes) runs no slower than the median speed of its peers' (the "
    "other ranks of its data-parallel group); DataLoader waits, syncs and allocator calls stay",
    NO_VARIATION: "the job without stragglers (the bound): every compute op at the mean of its op "
    "type over ranks, stages and steps, every transfer at its median",
}

WHATIFS: tuple[str, ...] = tuple(WHATIF_HELP)  # the vocabulary, in this order everywhere

# Fixes that change the work a scenario gives its ranks; each scenario says which apply.
JOB_FIXES: frozenset[str] = frozenset(
    {
        PEER_MEDIAN_COMPUTE,
        BALANCED_STAGES,
        DOUBLE_MICROBATCHES,
        BALANCED_BATCHES,
        PEER_MEDIAN_LINK,
        PEER_MEDIAN_COLLECTIVE,
        PEER_MEDIAN_HOST,
        NO_VARIATION,
    }
)


def others_median(factors: Sequence[float], groups: Sequence[Sequence[int]]) -> list[float]:
    """Each member's value brought down to the median over the *other* members of its group;
    a member already below it, or alone in its group, keeps its value.

    For ``peer_median_compute``, ``peer_median_link``, ``peer_median_collective`` and
    ``peer_median_host``: time
    factors (1 = nominal speed, 3 = three times as long) of the same link on every replica,
    of the same collective on every stage's group, of every rank's host in its
    data-parallel group.
    """
    out = list(factors)
    for group in groups:
        for i in group:
            others = [factors[j] for j in group if j != i]
            if others:
                out[i] = min(factors[i], median(others))
    return out


def differs(factors: Sequence[float], fixed: Sequence[float]) -> bool:
    """True when a job-level fix changes some rank's factor (the fix applies)."""
    return any(abs(a - b) > 1e-12 for a, b in zip(factors, fixed))


def faster(factors: Sequence[float], fixed: Sequence[float]) -> list[int]:
    """The members whose work (compute, transfer or host time) a job-level fix shortens by
    more than 1 % (its culprits)."""
    return [i for i, (a, b) in enumerate(zip(factors, fixed)) if b < a * 0.99]
