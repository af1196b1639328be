"""Phrases of one slow part of the job other than a GPU (:mod:`gpuprof.advice.distributed.slowpaths`):
a pipeline link, a group's collectives, a rank's host."""

from __future__ import annotations

from gpuprof.advice.phrasebook.book import templates

templates({
    "title.straggler-link": (
        "The pipeline link between stage {lower} and {upper} of replica {replica} ({ranks:ranks}) is {ratio:.1f}x "
        "slower than the same link on the other replicas: check that network path"
    ),
    "slowpath.link": (
        "the {phase} sends and receives between {ranks:ranks} (stages {lower} and {upper} of replica {replica}) "
        "take {median_us:dur} each (median of {calls}), {ratio:.2f}x the {peers_us:dur} of the same link on the "
        "other replicas"
    ),
    "slowpath.also_slow_link": (
        "also slow: the link between stage {lower} and {upper} of replica {replica} ({ranks:ranks}), {ratio:.2f}x"
    ),
    "slowpath.link_actions": (
        (
            "Test the path between {ranks:ranks} on its own (nccl-tests sendrecv_perf between those two GPUs, "
            "ib_write_bw between their NICs): a degraded cable, NIC, PCIe link or switch port shows there."
        ),
        (
            "Check the NICs those ranks use (NCCL_DEBUG=INFO names them; ibstat / ethtool for link speed and "
            "errors) and their GPU-NIC placement (nvidia-smi topo -m)."
        ),
        "Until it is fixed, move that pipeline boundary off the path (rank placement) or replace the node.",
    ),
    "title.straggler-collective": (
        "The {op} of stage{stages:s} {stages:list} ({ranks:ranks}) is {ratio:.1f}x slower than on the other "
        "stages: check those ranks' network"
    ),
    "slowpath.collective": (
        "{op} on {ranks:ranks} (stage{stages:s} {stages:list}) takes {median_us:dur} per call (median of {calls}), "
        "{ratio:.2f}x the {peers_us:dur} of the same op on the other stages' groups (a stage that also holds "
        "the embedding or output layer moves more bytes; the timers give no sizes)"
    ),
    "slowpath.collective_actions": (
        (
            "Test that group on its own (nccl-tests reduce_scatter_perf / all_gather_perf over {ranks:ranks}) "
            "against another stage's group: a slow NIC, a link that fell back to a slower transport, or a "
            "congested switch port shows there."
        ),
        "Check NCCL's choice of transport and NICs for those ranks (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=NET).",
    ),
    "title.straggler-host": (
        "Rank{ranks:s} {ranks:list}'s host work{ranks:v} {ratio:.1f}x as long {unit.per} as the ranks doing the "
        "same work, and the whole job waits: check that node's CPU"
    ),
    "slowpath.host": (
        "rank {rank}'s own host work (Python, framework, launches) takes {own_us:dur} {unit.per}, {ratio:.2f}x the "
        "{peers_us:dur} median of the other ranks doing the same work"
    ),
    "slowpath.host_actions": (
        (
            "Check the node of {ranks:ranks}: CPU frequency governor and throttling, other processes on its "
            "cores (top, pidstat), the process's CPU affinity and NUMA placement (numactl --show)."
        ),
        "Compare its host profile with a peer's (py-spy dump, or the profiler's CPU view): the same Python "
        "should take the same time.",
    ),
})
