"""The measured numbers of one rank for the advice, as a typed record (``RankSummary.facts``).

:class:`RankFacts` is built once per analysed rank by
:func:`gpuprof.accounting.facts.rank_facts` and read by the advice (mostly
``gpuprof.advice.local``) through its attributes, so a misspelled fact is a type error,
not a silent ``None``. A rank with nothing to analyse (no device activity) has no facts
(``RankSummary.facts`` is ``None``).

``None`` means unknown (never 0). Times are microseconds (``_us``), sizes bytes
(``_bytes``), shares fractions of one (``_share``), restricted to the analysis window
unless the field's documentation says otherwise (time left out between steps is outside
it: :meth:`~gpuprof.accounting.rules.context.RuleContext.clip`). Each field's meaning is
its ``doc`` metadata (``dataclasses.fields(RankFacts)``). Tables keyed by a name (calls per
API name, µs per copy direction, lost µs per rule) stay mappings; records with fixed
fields are records (:class:`~gpuprof.accounting.hostfacts.TrustFacts`,
:class:`~gpuprof.accounting.hostfacts.DdpBufferSync`,
:class:`~gpuprof.accounting.warmup.WarmupFacts`,
:class:`~gpuprof.accounting.enclosing.OpLoss`).

The facts are not written to the JSON report as such (its ``facts`` are a recommendation's,
:class:`gpuprof.model.report.Recommendation`); :meth:`RankFacts.to_dict` gives them as
plain JSON types, for scripts and tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuprof.accounting.enclosing import OpLoss
from gpuprof.accounting.hostfacts import DdpBufferSync, TrustFacts
from gpuprof.accounting.warmup import WarmupFacts


def _doc(text: str) -> Any:
    return field(metadata={"doc": text})


@dataclass(frozen=True, kw_only=True)
class RankFacts:
    """One rank's measured facts (see the module docstring; each field's ``doc``)."""

    # Steps.
    steps: int = _doc("complete steps in the window")
    step_time_us_median: float | None = _doc("median duration of those steps")
    # Kernels and their launches.
    kernels: int = _doc("compute kernels that start in the window")
    kernel_median_us: float | None = _doc("median duration of those kernels")
    compiled_kernel_share: float | None = _doc(
        "share of those kernels that Inductor generated (``triton_*`` names): a model already compiled is not "
        "told to compile itself"
    )
    compiled_regions: int = _doc(
        "host ranges of compiled code (``Torch-Compiled Region``, ``CompiledFxGraph``, ``CompiledFunction``), "
        "whole trace"
    )
    launch_median_us: float | None = _doc("median duration of the host calls that launched those kernels")
    kernels_shorter_than_launch_share: float | None = _doc(
        "share of those kernels that ran for less time than their own launch call took: the device cannot be "
        "kept busy by one host thread issuing them one by one"
    )
    launches_per_ms: float | None = _doc("compute kernels launched per millisecond of window")
    host_wait_us: float = _doc(
        "lost time during which the device waited for a late launch (any host activity)"
    )
    queued_gap_us: float = _doc(
        "lost time during which the next kernel was already launched (the device waited for something else, "
        "e.g. another stream's event)"
    )
    # Host calls that block on the device.
    sync_calls: int = _doc(
        "host calls that block on the device (runtime syncs, blocking copies, ``aten::item``)"
    )
    sync_calls_by_name: Mapping[str, int] = _doc(
        "the outermost of those calls per name, most frequent first (one ``.item()`` is one call)"
    )
    sync_wait_us: float = _doc("union of those calls' host time")
    scalar_reads: int = _doc(
        "``aten::item`` / ``aten::_local_scalar_dense`` calls (``.item()``, ``float(t)``, ...; the outermost one "
        "is counted when both appear)"
    )
    scalar_reads_per_step: float | None = _doc("those per step (``None`` without steps)")
    # The DataLoader.
    dataloader_calls: int = _doc("outermost DataLoader ``__next__`` calls in the window")
    dataloader_call_mean_us: float | None = _doc(
        "mean full duration of the (outermost) ``__next__`` calls overlapping the window"
    )
    dataloader_wait_us: float = _doc(
        "host time in DataLoader ``__next__`` inside the window (union over threads)"
    )
    dataloader_wait_per_step_us: float | None = _doc("that per step (``None`` without steps)")
    dataloader_single_process: bool | None = _doc(
        "the DataLoader iterator is ``_SingleProcessDataLoaderIter`` (``num_workers=0``); ``None``: no DataLoader"
    )
    # The device allocator.
    alloc_calls_by_name: Mapping[str, int] = _doc(
        "device allocator calls (``cudaMalloc``, ``cudaFree``, ``hipMalloc``, ...) per name, most frequent first"
    )
    alloc_calls: int = _doc("device allocator calls in the window")
    alloc_time_us: float = _doc("union of those calls' host time")
    alloc_before_first_compute_share: float | None = _doc(
        "share of that allocator time spent before the window's first compute kernel starts: a trace that "
        "opens with allocation and library set-up (a cold start) has most of it there"
    )
    # Copies and memsets on the device.
    copy_us_by_kind: Mapping[str, float] = _doc(
        "device time in copies per direction (``HtoD``, ``DtoH``, ``DtoD``, ``HtoH``, ``PtoP``, ``unknown``)"
    )
    exposed_copy_us_by_kind: Mapping[str, float] = _doc("the part of it no compute overlaps, per direction")
    memset_us: float = _doc("device time in memsets")
    exposed_memset_us: float = _doc("the part of it no compute overlaps")
    pageable_copies: int = _doc("copies from or to pageable host memory")
    pageable_copy_bytes: int | None = _doc("their bytes (``None``: the trace has no sizes)")
    pageable_copy_us: float = _doc("their device time")
    pageable_exposed_copy_us: float = _doc("the part of pageable copies no compute overlaps")
    # Communication.
    comm_us: float = _doc("device time in collective / P2P kernels")
    comm_exposed_us: float = _doc("the part of it no compute overlaps")
    # Memory, from ``[memory]`` samples over the whole trace.
    mem_peak_allocated_bytes: int | None = _doc("peak allocated device memory, whole trace")
    mem_peak_reserved_bytes: int | None = _doc("peak reserved device memory, whole trace")
    mem_capacity_bytes: int | None = _doc("the device's memory")
    mem_peak_share: float | None = _doc("peak (reserved if known, else allocated) / capacity")
    # Local attribution and where the lost time sits.
    local_lost_us_by_rule: Mapping[str, float] = _doc(
        "lost time each local rule gets when only the local claims are attributed (precedence as in "
        ":mod:`gpuprof.accounting.attribution`; within one cause, in ``RULES`` order), and ``unclaimed``: what "
        "no rule got. The cross-rank claims can only take time away from these"
    )
    lost_by_op: Mapping[str, tuple[OpLoss, ...]] = _doc(
        "for ``host``, ``sync`` and ``other`` (local attribution): the top enclosing host ops or annotations of "
        "that lost time (:func:`gpuprof.accounting.enclosing.lost_by_op`)"
    )
    host_wait_in_launch_share: float | None = _doc(
        "of the time the device waited for a late launch, the share the launching threads spent inside launch "
        "API calls (high: launch-bound; low: framework / Python overhead)"
    )
    workload: str | None = _doc("``training``, ``inference`` or ``None`` (unknown), from op names")
    # (``field`` itself for the record-typed fields, which ruff would take for shared defaults.)
    ddp_buffer_sync: DdpBufferSync | None = field(
        metadata={"doc": "DDP's per-forward buffer broadcast (``None``: not seen)"}
    )
    trust: TrustFacts = field(
        metadata={
            "doc": "how far host times and the trace's completeness can be trusted "
            "(:func:`gpuprof.accounting.hostfacts.trust`)"
        }
    )
    # The window.
    device_aligned_steps: bool = _doc(
        "whether step bounds follow the device (see :mod:`gpuprof.accounting.window`)"
    )
    step_marker: str | None = _doc("the host marker the steps come from (``None``: no steps)")
    window_gaps_us: float = _doc(
        "time between the window's outer bounds left out of it because no selected step covers it (0 when steps "
        "are contiguous)"
    )
    trace_lacks: Mapping[str, str] = _doc(
        "what the trace lacks, evidence -> why (:func:`gpuprof.accounting.evidence.trace_lacks`)"
    )
    warmup: WarmupFacts = field(
        metadata={"doc": "the first step against the others (:mod:`gpuprof.accounting.warmup`)"}
    )

    def to_dict(self) -> dict[str, Any]:
        """The facts as plain JSON types, fields in order, records as nested dicts."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(v: Any) -> Any:
    if isinstance(v, (OpLoss, DdpBufferSync, TrustFacts, WarmupFacts)):
        return v.to_dict()
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


__all__ = ["RankFacts"]
