"""Every cause of lost GPU time, declared once: its precedence, colour, label, its general
advice and what it needs from the trace.

A cause is a member of :class:`~gpuprof.model.report.Cause` (its value is the JSON
contract's name) and one :class:`CauseSpec` here; every table that lists causes reads it
from :data:`REGISTRY`: the attribution's precedence (:data:`gpuprof.accounting.attribution.PRECEDENCE`),
the charts' colours (:mod:`gpuprof.render.palette`), the narrow tables' labels
(:data:`gpuprof.render.figures.CAUSE_SHORT`), the general advice the phrasebook writes
when no finding spoke for a cause (:mod:`gpuprof.advice.phrasebook.general`), what a
recommendation of the cause needs from the trace (:data:`gpuprof.advice.context.CATEGORY_NEEDS`)
and the cause's flags (a wait between ranks, time the host holds). Adding a cause is its
enum member, its declaration here, and the rule that claims its time
(:mod:`gpuprof.accounting.rules`, or the job model's claims): docs/architecture.md.

The declarations are checked when this module is imported: one per member of the enum,
precedences 1..n with ``other`` last (it is what no rule claims).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuprof.model.report import Cause


@dataclass(frozen=True)
class CauseSpec:
    """One cause. ``precedence``: its place (1 first) in the order in which the attribution
    gives a lost microsecond claimed by several causes (docs/attribution.md says why this
    order). ``color``: its colour in charts (``#rrggbb``). ``short``: its label in narrow
    tables. ``title``, ``missing``, ``actions``: the general advice when no finding spoke
    for it (its title; what was missing to name a more specific fix, after "general advice:";
    the changes to try). ``needs``: the evidence (:class:`gpuprof.accounting.evidence.Evidence`
    values) any recommendation of the cause needs from the trace, unless its id says more.
    ``between_ranks``: time lost in or waiting for communication with other ranks: measured
    from every rank's summary, a recommendation of it concerns the whole job, and what the
    device was doing names it before what the host was. ``waits_for_ranks``: a rank waiting
    for another rank (the time a rank's own work does not take). ``host_side``: the device
    starves while the host holds it (time a profiler that slows the host inflates)."""

    cause: Cause
    precedence: int
    color: str
    short: str
    title: str
    missing: str
    actions: tuple[str, ...]
    needs: frozenset[str] = frozenset()
    between_ranks: bool = False
    waits_for_ranks: bool = False
    host_side: bool = False


REGISTRY: dict[Cause, CauseSpec] = {}


def declare(spec: CauseSpec) -> CauseSpec:
    """Add ``spec``; a cause is declared once."""
    if spec.cause in REGISTRY:
        raise ValueError(f"cause {spec.cause.value!r} is declared twice")
    REGISTRY[spec.cause] = spec
    return spec


def spec_of(cause: Cause | str) -> CauseSpec:
    """The declaration of ``cause`` (a :class:`Cause` or its name)."""
    return REGISTRY[Cause(cause)]


def precedence() -> tuple[Cause, ...]:
    """Every cause, first in precedence first (``other`` last)."""
    return tuple(s.cause for s in sorted(REGISTRY.values(), key=lambda s: s.precedence))


def where(**flags: bool) -> tuple[Cause, ...]:
    """The causes whose flags have the values given (``between_ranks=True``, ...), in the
    contract's order."""
    return tuple(c for c in Cause if c in REGISTRY and all(getattr(REGISTRY[c], k) == v for k, v in flags.items()))


def check(registry: Mapping[Cause, CauseSpec]) -> None:
    """Raise ``ValueError`` unless ``registry`` declares every cause once, with precedences
    1..n and ``other`` last."""
    missing = [c.value for c in Cause if c not in registry]
    if missing:
        raise ValueError(f"causes without a declaration in gpuprof.model.causes: {', '.join(missing)}")
    order = sorted(s.precedence for s in registry.values())
    if order != list(range(1, len(registry) + 1)):
        raise ValueError(f"cause precedences must be 1..{len(registry)}, each once; got {order}")
    if max(registry.values(), key=lambda s: s.precedence).cause is not Cause.OTHER:
        raise ValueError("'other' must come last in precedence: it is what no rule claims")


# --- the declarations -------------------------------------------------------------------------

_EXPOSURE = frozenset({"compute_kernels", "all_kernels"})  # what the compute beside it needs

for _spec in (
    CauseSpec(
        Cause.PIPELINE_BUBBLE, 1, "#CC79A7", "bubble",  # reddish purple
        "Pipeline stages sit idle waiting for their neighbours: shrink the bubble",
        "the pipeline's schedule could not be worked out from the trace (microbatch count or stage times unknown)",
        (
            "Use more microbatches per step (at least 4x the number of stages) at the same global batch.",
            "Use an interleaved or zero-bubble schedule (virtual pipeline stages).",
            "Balance the layers across stages so that no stage computes longer per microbatch than the others.",
        ),
        _EXPOSURE, between_ranks=True, waits_for_ranks=True,
    ),
    CauseSpec(
        Cause.COMMUNICATION, 3, "#56B4E9", "comm",  # sky blue
        "Collectives run with no compute beside them: overlap them or make them cheaper",
        "no specific communication finding stood out (message sizes or the other ranks are missing)",
        (
            "Overlap gradient collectives with backward (DDP buckets, FSDP prefetch, Megatron --overlap-grad-reduce).",
            "Check the transport with NCCL_DEBUG=INFO and send less (larger buckets, reduce-scatter, compression).",
        ),
        _EXPOSURE, between_ranks=True,
    ),
    CauseSpec(
        Cause.STRAGGLER, 2, "#D55E00", "straggler",  # vermillion: far from compute's blue for every vision
        "Ranks wait in collectives for slower ranks: find what makes those ranks late",
        "no single rank could be named as the one the others wait for",
        (
            "Profile every rank and compare the slowest one's GPU (clocks, throttling), node and data with the others.",
            "Balance the work per rank (length bucketing, sequence packing, balanced sharding).",
        ),
        _EXPOSURE, between_ranks=True, waits_for_ranks=True,
    ),
    CauseSpec(
        Cause.MEMORY, 4, "#E69F00", "memory",  # orange
        "The GPU waits on memory management and transfers: overlap copies, pin memory, stop allocator churn",
        "no single kind of memory operation stood out",
        (
            "Pin host buffers and copy with non_blocking=True on a side stream, one step ahead.",
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and keep shapes stable.",
        ),
        _EXPOSURE,
    ),
    CauseSpec(
        Cause.DATALOADER, 5, "#F0E442", "data",  # yellow
        "The GPU waits for input data: speed up the input pipeline",
        "the DataLoader calls are not in the trace",
        ("Raise DataLoader num_workers, use pin_memory=True and persistent_workers=True.",),
        frozenset({"host_events"}), host_side=True,
    ),
    CauseSpec(
        Cause.SYNC, 6, "#009E73", "sync",  # bluish green
        "The host blocks on the GPU inside the loop: remove the syncs",
        "the blocking calls could not be tied to the device's idle time",
        (
            "Remove .item() / .cpu() / print(loss) from the step; read metrics every N steps.",
            "Find hidden syncs with torch.cuda.set_sync_debug_mode('warn').",
        ),
        frozenset({"host_events", "runtime_calls"}), host_side=True,
    ),
    CauseSpec(
        Cause.HOST, 7, "#000000", "host",  # black
        "The host issues GPU work too slowly: cut framework and Python overhead",
        "the trace does not show which host work delays the launches (no launch calls or host ops)",
        (
            "torch.compile the model (mode='reduce-overhead' also captures CUDA graphs).",
            "Profile the host side (py-spy, the profiler's CPU view) and move Python work out of the step.",
        ),
        frozenset({"host_events", "launch_calls", "all_launches"}), host_side=True,
    ),
    CauseSpec(
        Cause.OTHER, 8, "#C8C8C8", "other",  # light grey: unexplained
        "Idle GPU time that no rule explains: profile with more detail",
        "nothing in the trace explains this idle time (waits on other streams, device scheduling, or events "
        "the trace left out)",
        (
            (
                "Record the trace with the host side (activities CPU and CUDA, record_shapes=True) and without "
                "filters, so that every idle gap can be tied to what the host or another stream was doing."
            ),
            "Look at the gaps in Perfetto: gpuprof annotate TRACE -o annotated.json marks each one.",
        ),
    ),
):
    declare(_spec)
check(REGISTRY)


__all__ = ["REGISTRY", "CauseSpec", "check", "declare", "precedence", "spec_of", "where"]
