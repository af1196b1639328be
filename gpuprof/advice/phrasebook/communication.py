"""Phrases of the communication findings (:mod:`gpuprof.advice.distributed`): slow
collectives and their bandwidth, exposed collectives, the collectives of an inference job."""

from __future__ import annotations

from collections.abc import Sequence

from gpuprof.advice.phrasebook.book import phrase, templates
from gpuprof.util.phrases import duration, value_range


def _gb(gbps: float) -> str:
    return f"{gbps:.1f} GB/s" if gbps < 100 else f"{gbps:.0f} GB/s"


def _size(nbytes: float) -> str:
    if nbytes >= 1e5:
        return f"{nbytes / 1e6:.1f} MB"
    return f"{nbytes / 1e3:.0f} KB" if nbytes >= 1e3 else f"{nbytes:.0f} B"


def _times(factor: float) -> str:
    return f"{factor:.0f}x"


@phrase("communication.maybe_waiting")
def maybe_waiting(ranks_present: int | None, world_size: int | None) -> str:
    """``ranks_present`` of ``world_size`` ranks in the input (``None``: some process groups
    are only partly in it)."""
    missing = (
        "some process groups are only partly in the input" if ranks_present is None
        else f"only {ranks_present} of {world_size or 'an unknown number of'} ranks in the input"
    )
    return f"part of this may be waiting for ranks that are not in the input: {missing}"


@phrase("collectives.slow_calls")
def slow_calls(
    rank: int,
    calls: int,
    names: Sequence[str],
    sizes_bytes: tuple[float, float],
    duration_us: tuple[float, float],
    busbw_gbps: tuple[float, float] | None,
    peak_gbps: float,
    device: str | None,
    below: tuple[float, float] | None,
    note: str | None,
) -> str:
    """A rank's slow collectives against the link's peak: the bus bandwidth they reach and
    how far below the peak, or why that is not measurable."""
    what = (
        f"rank {rank}: {calls} {'/'.join(names) or 'collective'} calls of "
        f"{value_range(*sizes_bytes, _size)} take {value_range(*duration_us, duration)}"
    )
    peak = f"the ~{_gb(peak_gbps)} link peak of {device or 'this GPU'}"
    if busbw_gbps is None or below is None:  # the transfer part is not known or too short to time
        return f"{what}, over 10x what their bytes need at {peak}; bandwidth " + str(note or "not measurable")
    return f"{what}: {value_range(*busbw_gbps, _gb)} achieved bus bandwidth, {value_range(*below, _times)} below {peak}"


@phrase("collectives.bandwidth")
def bandwidth(
    rank: int,
    calls: int,
    names: Sequence[str],
    sizes_bytes: tuple[float, float],
    duration_us: tuple[float, float],
    kind: str,
    gbps: float | None,
    peak_gbps: float | None,
    device: str | None,
    of_peak_pct: float | None,
    note: str | None,
) -> str:
    """A rank's collectives: the median bandwidth they reach, against the link's peak."""
    what = (
        f"rank {rank}: {calls} {'/'.join(names)} calls of "
        f"{value_range(*sizes_bytes, _size)} take {value_range(*duration_us, duration)}"
    )
    if gbps is None:  # no call's transfer part could be timed (see gpuprof.job.linkspeed)
        return f"{what}: bandwidth " + str(note or "not measurable")
    text = f"{what}: median {kind} bandwidth {_gb(gbps)}"
    if peak_gbps and of_peak_pct is not None:
        text += f", {of_peak_pct:.1f}% of the ~{_gb(peak_gbps)} link peak of {device or 'this GPU'}"
    return text


_TRANSPORT = (
    "Check the transport with NCCL_DEBUG=INFO (RCCL: the same variable): the log names the path per peer "
    "(P2P/CUMEM or NVLS over NVLink/xGMI is fast; SHM, NET/Socket or a disabled P2P (NCCL_P2P_DISABLE=1) is "
    "not) and the protocol chosen."
)
_MAY_WAIT = " (profile all ranks first: part may be waiting)"
_OVERLAP_TITLE = "Collectives run after compute instead of beside it: overlap them with backward"
_SEND_LESS_TITLE = "Collectives take longer than the compute that hides them: send less or send faster"
_EXPOSED = "rank {rank} loses {per_step_us:dur} {unit.per} ({step_pct:.1f}% {unit.of_its}) to collectives with no compute beside them"
_HALF = "estimate assumes half of the exposed time can be hidden"
_OVERLAPS = "{share_pct:.0f}% of collective device time "
_PEAKS = "link peaks are approximate datasheet figures (both directions), and collectives are taken to reach 40% of them"

templates({
    # slow collectives
    "title.communication-slow-collectives": "Collectives run far below the link speed: check the transport NCCL/RCCL uses",
    "title.communication-slow-collectives.absent": (
        "Collectives take 10x+ longer than their bytes need: other ranks are likely late (or the transport is "
        "slow); profile all ranks"
    ),
    "collectives.beyond_link": (
        "rank {rank}: at link speed its exposed collectives would take {at_link_us_per_step:dur} {unit.per}; "
        "{excess_us_per_step:dur} {unit.per} more is spent in {calls} collectives that take over 10x what their "
        "bytes need"
    ),
    "collectives.overlap_already": _OVERLAPS + "already overlaps compute",
    "collectives.overlap": _OVERLAPS + "overlaps compute",
    "collectives.overlap_tail": (
        _OVERLAPS + "overlaps compute (gradient buckets already run during backward; the exposed part is the tail)"
    ),
    "collectives.partial_groups": (
        "only part of each process group is in the input: a collective ends when its last member arrives, "
        "so the time beyond the transfer is most likely this rank waiting for the others"
    ),
    "collectives.at_link_speed": "at link speed (the excess gone altogether) up to {upper_pct:.1f}%: " + _PEAKS,
    "collectives.estimate_upper": (
        "estimate (an upper bound): that excess vanishes, i.e. the late ranks arrive with this one or the "
        "transport runs at link speed; " + _PEAKS + ". Overlap or bucket tuning could at most hide the time at "
        "link speed"
    ),
    "collectives.actions": (
        _TRANSPORT,
        (
            "Look for settings that force a slow path: NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE, a "
            "NCCL_SOCKET_IFNAME on the wrong interface, or GPUs of one node in different containers without "
            "shared IPC (NCCL then falls back to sockets)."
        ),
        (
            "Measure the link alone with nccl-tests (all_reduce_perf -b 8M -e 512M -f 2 -g <GPUs>) on the same "
            "nodes: if it reaches the expected bus bandwidth the job's setup differs, if not the system does."
        ),
    ),
    # with members missing from the input the first suspect is a late rank, else the transport
    "collectives.actions_absent": (
        (
            "Profile all ranks (or whole process groups) and rerun gpuprof analyze on the folder: the "
            "cross-rank analysis then names the late rank(s) and measures how long the others wait."
        ),
        _TRANSPORT,
        (
            "If a rank is late, look at what it does before the collective (data loading, host-side "
            "work, checkpointing, logging) on that rank."
        ),
    ),
    # exposed collectives
    "title.comm-overlap": _OVERLAP_TITLE,
    "title.comm-overlap.unsure": _OVERLAP_TITLE + _MAY_WAIT,
    "title.exposed-communication": _SEND_LESS_TITLE,
    "title.exposed-communication.unsure": _SEND_LESS_TITLE + _MAY_WAIT,
    "communication.exposed": _EXPOSED + " (waiting for late ranks excluded)",
    "communication.exposed_partial": _EXPOSED,
    "communication.estimate_half": _HALF,
    "communication.estimate_half_excess": (
        _HALF + ", leaving out the time slow collectives spend beyond their transfer at link speed"
    ),
    "communication.profile_all": (
        "Profile all ranks (or whole process groups) first: with only part of the job in the input, part of "
        "this time may be waiting for a late rank, which no overlap or tuning removes."
    ),
    "communication.overlap_megatron": (
        (
            "Megatron: --overlap-grad-reduce (with --use-distributed-optimizer) starts the gradient "
            "reduce-scatter during backward; --overlap-param-gather hides the parameter all-gather behind "
            "the next forward."
        ),
        "Larger --ddp-bucket-size for fewer, bandwidth-bound transfers.",
    ),
    "communication.overlap_ddp_fsdp": (
        (
            "DDP: let gradient buckets all-reduce during backward (do not call all-reduce by hand after "
            "backward; tune bucket_cap_mb, e.g. 25 -> 50-100 MB for fewer, larger transfers; "
            "gradient_as_bucket_view=True)."
        ),
        (
            "FSDP: enable backward_prefetch=BACKWARD_PRE and forward_prefetch=True (FSDP2: "
            "set_modules_to_forward_prefetch / reshard_after_forward) so all-gathers run ahead of compute."
        ),
        "Put communication on its own stream and avoid synchronizing on it before it is needed.",
    ),
    "communication.send_less": (
        (
            "Reduce the volume: gradient compression (PowerSGD / bf16 or fp16 compression hooks for DDP), "
            "reduce-scatter instead of all-reduce with sharded optimizers."
        ),
        (
            "Use the topology: hierarchical all-reduce (intra-node NVLink first, then inter-node), check "
            "NCCL_ALGO/NCCL_PROTO and that inter-node traffic uses RDMA (NCCL_DEBUG=INFO shows the transport)."
        ),
        "Larger buckets (DDP bucket_cap_mb) for fewer, bandwidth-bound transfers.",
    ),
    # inference
    "title.communication.inference": (
        "Tensor-parallel collectives sit on the inference critical path: make them cheaper or fewer"
    ),
    "communication.inference": (
        "inference job (no backward or optimizer work): each layer's all-reduce must finish before the "
        "next layer starts, so it cannot be hidden behind backward"
    ),
    "communication.inference_actions": (
        (
            "Use a one-shot / custom all-reduce for small messages (vLLM's custom all-reduce, PyTorch "
            "symmetric-memory multimem all-reduce) and fuse the all-reduce with the following RMSNorm "
            "(vLLM / torch.compile fusion passes)."
        ),
        (
            "Lower the tensor-parallel degree and serve with more replicas (data parallel) when the model "
            "fits: fewer all-reduce hops per token."
        ),
        (
            "Capture decode steps in CUDA graphs so collectives and small kernels launch back to back; "
            "with NCCL_DEBUG=INFO check that the all-reduce uses NVLink (P2P/NVLS), not SHM or the network."
        ),
    ),
})
