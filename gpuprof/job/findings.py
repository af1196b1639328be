"""The job-level findings of the cross-rank analysis, as typed records.

:class:`JobFindings` is what :func:`gpuprof.job.cross_rank.analyze_job` finds across ranks
and what the advice, the step view and the report read: each rank's row
(:class:`RankRow`, merged into its JSON row), the named stragglers (:class:`Straggler`)
and how the waits were measured (:class:`StragglerAnalysis`), the rank that set the pace
of each step (:class:`CriticalStep`), the compute imbalance (:class:`ComputeImbalance`),
the barrier waits of op-level timelines (:class:`BarrierFindings`), the pipeline
(:class:`PipelineFindings`) and the collectives' bandwidth (:class:`RankBandwidth`).

Times are microseconds (``_us``), sizes bytes, bandwidths GB/s (``_gbps``), shares
fractions of one unless named ``_pct``. Every record's ``to_dict`` writes the report's
``job`` section exactly as it has been written (docs/report.md): keys in the same order,
optional keys absent where they were absent, ranks as string keys where they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuprof.job.whatif_results import WhatIfResults

from gpuprof.job.stage_findings import PipelineFindings, SlowestStage, StageRow

# The report's line when some process groups are only partly in the input.
PARTIAL_GROUPS_NOTE = (
    "some process groups are only partly in the input: waits measured among the ranks "
    "present are lower bounds, and the slowest member may be one of the absent ranks, "
    "so no straggler is named for those groups"
)


@dataclass(frozen=True)
class RankRow:
    """One rank's waits in the job: in collectives with no compute beside it
    (``straggler_wait_us``, before precedence; per step), hidden by compute on another
    stream, whether it is a named straggler, collectives matched and arrived last at, its
    clock's offset; at barriers (op-level timelines), and its pipeline stage and that
    stage's bubble fraction (``None``: not measured, absent from the JSON)."""

    straggler_wait_us: float
    hidden_wait_us: float
    straggler_wait_us_per_step: float
    is_straggler: bool
    last_arrivals: int
    collectives: int
    clock_offset_us: float
    barrier_wait_us_per_step: float | None = None
    stage: int | None = None
    bubble_fraction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "straggler_wait_us": self.straggler_wait_us,
            "hidden_wait_us": self.hidden_wait_us,
            "straggler_wait_us_per_step": self.straggler_wait_us_per_step,
            "is_straggler": self.is_straggler,
            "last_arrivals": self.last_arrivals,
            "collectives": self.collectives,
            "clock_offset_us": self.clock_offset_us,
        }
        if self.barrier_wait_us_per_step is not None:
            out["barrier_wait_us_per_step"] = self.barrier_wait_us_per_step
        if self.stage is not None:
            out["stage"] = self.stage
            if self.bubble_fraction is not None:
                out["bubble_fraction"] = self.bubble_fraction
        return out


@dataclass(frozen=True)
class Straggler:
    """A rank the others wait for: the wait it causes per step, collectives it arrived last
    at (of those it took part in), the phase that makes it slow (its ratio and excess per
    step over its peers' median; ``None``: none stands out), how late it begins its first
    step, and the job's critical-path gain per step if it arrived with the next-latest
    member (``gains_us``: per collective, largest first)."""

    rank: int
    caused_wait_us_per_step: float
    last_arrivals: int
    collectives: int
    phase: str | None
    phase_ratio: float | None
    phase_excess_us_per_step: float | None
    late_start_us: float | None
    gain_us_per_step: float
    gains_us: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "caused_wait_us_per_step": self.caused_wait_us_per_step,
            "last_arrivals": self.last_arrivals,
            "collectives": self.collectives,
            "phase": self.phase,
            "phase_ratio": self.phase_ratio,
            "phase_excess_us_per_step": self.phase_excess_us_per_step,
            "late_start_us": self.late_start_us,
            "gain_us_per_step": self.gain_us_per_step,
            "gains_us": list(self.gains_us),
        }


@dataclass(frozen=True)
class EarlyStarter:
    """A rank that begins its steps well before the median rank (``lead_us``) and the last
    one (``lead_over_last_us``), and waits for them."""

    rank: int
    lead_us: float
    lead_over_last_us: float
    wait_us_per_step: float

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "lead_us": self.lead_us, "lead_over_last_us": self.lead_over_last_us,
                "wait_us_per_step": self.wait_us_per_step}


@dataclass(frozen=True)
class Arrivals:
    """How lateness is spread over the complete collectives: how many, how often each rank
    was last (most often first), whether no rank is last at most of them (``rotating``),
    and the sum over them of the last arrival minus the next-latest, per step."""

    collectives: int
    last_counts: Mapping[int, int]
    rotating: bool
    gain_us_per_step: float

    def to_dict(self) -> dict[str, Any]:
        return {"collectives": self.collectives, "last_counts": {str(r): n for r, n in self.last_counts.items()},
                "rotating": self.rotating, "gain_us_per_step": self.gain_us_per_step}


@dataclass(frozen=True)
class AloneInput:
    """One rank of a job of several in the input: nobody to wait for is in it."""

    ranks_present: int
    world_size: int | None

    @property
    def note(self) -> str:
        return (
            f"only {self.ranks_present} of {self.world_size or 'an unknown number of'} ranks in the input: "
            "waiting for other ranks cannot be measured"
        )


@dataclass(frozen=True)
class StragglerAnalysis:
    """How the waits were measured: each rank's clock offset, calls no other rank matched,
    collectives matched (``None``: one rank, nothing to match); ``alone`` when one rank of
    several is in the input; the world size inferred from the collectives and its line;
    the process groups only partly in the input (``(present, expected)``); the arrivals;
    the critical-path gain per step if every named straggler arrived with the latest other
    member; the ranks that start early and wait."""

    clock_offsets_us: Mapping[int, float] = field(default_factory=dict)
    unmatched_calls: int = 0
    collectives_matched: int | None = None
    alone: AloneInput | None = None
    world_size_inferred: int | None = None
    world_size_note: str | None = None
    incomplete_groups: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    arrivals: Arrivals | None = None
    stragglers_gain_us_per_step: float | None = None
    early_starters: tuple[EarlyStarter, ...] = ()

    @property
    def note(self) -> str | None:
        """Why waits are lower bounds or cannot be measured (ranks missing); ``None``: all there."""
        if self.alone is not None:
            return self.alone.note
        return PARTIAL_GROUPS_NOTE if self.incomplete_groups else None

    @property
    def world_size(self) -> int | None:
        """The world size this analysis states (traces of one rank, or the collectives)."""
        return self.alone.world_size if self.alone is not None else self.world_size_inferred

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "clock_offsets_us": {str(r): o for r, o in self.clock_offsets_us.items()},
            "unmatched_calls": self.unmatched_calls,
        }
        if self.collectives_matched is not None:
            out["collectives_matched"] = self.collectives_matched
        if self.alone is not None:
            out["note"] = self.alone.note
            out["ranks_present"] = self.alone.ranks_present
            out["world_size"] = self.alone.world_size
            return out
        if self.world_size_inferred is not None:
            out["world_size"] = self.world_size_inferred
            out["world_size_note"] = self.world_size_note
        if self.incomplete_groups:
            out["incomplete_groups"] = {g: {"present": a, "expected": b} for g, (a, b) in self.incomplete_groups.items()}
            out["note"] = PARTIAL_GROUPS_NOTE
        if self.arrivals is not None:
            out["arrivals"] = self.arrivals.to_dict()
        if self.stragglers_gain_us_per_step is not None:
            out["stragglers_gain_us_per_step"] = self.stragglers_gain_us_per_step
        if self.early_starters:
            out["early_starters"] = [e.to_dict() for e in self.early_starters]
        return out


@dataclass(frozen=True)
class CriticalStep:
    """The rank that waited least (in collectives and pipeline bubbles) in a step: it set the pace."""

    step: int
    rank: int
    waited_us: float
    others_median_waited_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "rank": self.rank, "waited_us": self.waited_us,
                "others_median_waited_us": self.others_median_waited_us}


@dataclass(frozen=True)
class RankImbalance:
    """The rank with the most compute per step over the median rank."""

    max_over_median: float | None
    max_rank: int
    max_compute_us_per_step: float
    median_compute_us_per_step: float

    def to_dict(self) -> dict[str, Any]:
        return {"max_over_median": self.max_over_median, "max_rank": self.max_rank,
                "max_compute_us_per_step": self.max_compute_us_per_step,
                "median_compute_us_per_step": self.median_compute_us_per_step}


@dataclass(frozen=True)
class StageImbalance:
    """The pipeline stage with the most compute per microbatch over the median stage and over
    the other stages' median (the pipeline's ``slowest_stage_ratio``)."""

    max_over_median: float | None
    max_over_others_median: float | None
    max_stage: int
    max_compute_per_microbatch_us: float
    median_compute_per_microbatch_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"max_over_median": self.max_over_median, "max_over_others_median": self.max_over_others_median,
                "max_stage": self.max_stage, "max_compute_per_microbatch_us": self.max_compute_per_microbatch_us,
                "median_compute_per_microbatch_us": self.median_compute_per_microbatch_us}


@dataclass(frozen=True)
class ComputeImbalance:
    across_ranks: RankImbalance | None = None
    across_stages: StageImbalance | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.across_ranks is not None:
            out["across_ranks"] = self.across_ranks.to_dict()
        if self.across_stages is not None:
            out["across_stages"] = self.across_stages.to_dict()
        return out


@dataclass(frozen=True)
class LateComm:
    """An op the ranks everyone waits for run between their last compute and the barriers:
    calls, median, calls over 5x the median (their range, the barriers, 0-based, where they
    fell), total, and whether the waiting ranks run it there too (their median)."""

    name: str
    calls: int
    median_us: float
    outliers: int
    outlier_us: tuple[float, float] | None
    outlier_barriers: tuple[int, ...]
    total_us: float
    only_late_ranks: bool
    waiting_median_us: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "calls": self.calls, "median_us": self.median_us, "outliers": self.outliers,
                "outlier_us": None if self.outlier_us is None else list(self.outlier_us),
                "outlier_barriers": list(self.outlier_barriers), "total_us": self.total_us,
                "only_late_ranks": self.only_late_ranks, "waiting_median_us": self.waiting_median_us}


@dataclass(frozen=True)
class BarrierFindings:
    """Waits at barriers of op-level timelines (ops that start at the same instant on every
    worker): how many, each rank's wait per step (before precedence) and times last, the
    ranks waited for, what the last arriver did just before (counted, most first), and the
    waited-for ranks' communication before the barriers (``None``: not looked at)."""

    barriers: int
    wait_us_per_step: Mapping[int, float]
    last_arrivals: Mapping[int, int]
    waited_for_ranks: tuple[int, ...]
    last_activity: Mapping[str, int]
    late_comm: tuple[LateComm, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "barriers": self.barriers,
            "wait_us_per_step": {str(r): w for r, w in self.wait_us_per_step.items()},
            "last_arrivals": {str(r): n for r, n in self.last_arrivals.items()},
            "waited_for_ranks": list(self.waited_for_ranks),
            "last_activity": dict(self.last_activity),
        }
        if self.late_comm is not None:
            out["late_comm"] = [c.to_dict() for c in self.late_comm]
        return out


@dataclass(frozen=True)
class SlowCalls:
    """A rank's collectives slower than their link allows: names, sizes and durations (min,
    max), and the bus bandwidth reached (min, max over the measurable ones; ``None``: none)."""

    names: tuple[str, ...]
    sizes_bytes: tuple[int, int]
    duration_us: tuple[float, float]
    busbw_gbps: tuple[float, float] | None

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "sizes_bytes": list(self.sizes_bytes),
                "duration_us": list(self.duration_us),
                "busbw_gbps": None if self.busbw_gbps is None else list(self.busbw_gbps)}


@dataclass(frozen=True)
class RankBandwidth:
    """One rank's sized collectives against its link (see :func:`gpuprof.job.linkspeed.rank_bandwidth`):
    the last four figures need the link's peak (``peak_gbps``, ``None`` unknown)."""

    calls: int
    bytes_per_step: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    measurable_calls: int
    bandwidth_note: str | None
    peak_gbps: float | None
    sizes_bytes: tuple[int, int]
    duration_us: tuple[float, float]
    exposed_us_per_step: float
    names: tuple[str, ...]
    at_link_us_per_step: float | None = None
    slow_calls: int | None = None
    excess_us_per_step: float | None = None
    busbw_share_of_peak: float | None = None
    slow: SlowCalls | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "calls": self.calls,
            "bytes_per_step": self.bytes_per_step,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "measurable_calls": self.measurable_calls,
            "bandwidth_note": self.bandwidth_note,
            "peak_gbps": self.peak_gbps,
            "sizes_bytes": list(self.sizes_bytes),
            "duration_us": list(self.duration_us),
            "exposed_us_per_step": self.exposed_us_per_step,
            "names": list(self.names),
            "at_link_us_per_step": self.at_link_us_per_step,
            "slow_calls": self.slow_calls,
            "excess_us_per_step": self.excess_us_per_step,
        }
        if self.peak_gbps is not None:
            out["busbw_share_of_peak"] = self.busbw_share_of_peak
            if self.slow is not None:
                out["slow"] = self.slow.to_dict()
        return out


@dataclass(frozen=True)
class JobFindings:
    """Everything the cross-rank analysis found (``measured``: ``False`` when no rank had
    device activity: nothing was looked at, and the JSON section is empty)."""

    measured: bool = False
    per_rank: Mapping[int, RankRow] = field(default_factory=dict)
    stragglers: tuple[Straggler, ...] = ()
    straggler_analysis: StragglerAnalysis = field(default_factory=StragglerAnalysis)
    critical_rank_per_step: tuple[CriticalStep, ...] = ()
    compute_imbalance: ComputeImbalance = field(default_factory=ComputeImbalance)
    barrier_waits: BarrierFindings | None = None
    pipeline: PipelineFindings | None = None
    collective_bandwidth: Mapping[int, RankBandwidth] = field(default_factory=dict)
    whatif: WhatIfResults | None = None

    @cached_property
    def _whatif_json(self) -> dict[str, Any] | None:
        return self.whatif.to_dict() if self.whatif is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The findings as the report's JSON writes them (``per_rank`` keyed by int: it
        goes into each rank's row, not the ``job`` section)."""
        if not self.measured:
            return {}
        out: dict[str, Any] = {
            "per_rank": {r: row.to_dict() for r, row in self.per_rank.items()},
            "stragglers": [s.to_dict() for s in self.stragglers],
            "straggler_analysis": self.straggler_analysis.to_dict(),
            "critical_rank_per_step": [c.to_dict() for c in self.critical_rank_per_step],
            "compute_imbalance": self.compute_imbalance.to_dict(),
        }
        if self.barrier_waits is not None:
            out["barrier_waits"] = self.barrier_waits.to_dict()
        if self.pipeline is not None:
            out["pipeline"] = self.pipeline.to_dict()
        if self.collective_bandwidth:
            out["collective_bandwidth"] = {str(r): b.to_dict() for r, b in self.collective_bandwidth.items()}
        out["whatif"] = self._whatif_json
        return out


__all__ = [
    "PARTIAL_GROUPS_NOTE",
    "AloneInput",
    "Arrivals",
    "BarrierFindings",
    "ComputeImbalance",
    "CriticalStep",
    "EarlyStarter",
    "JobFindings",
    "LateComm",
    "PipelineFindings",
    "RankBandwidth",
    "RankImbalance",
    "RankRow",
    "SlowCalls",
    "SlowestStage",
    "StageImbalance",
    "StageRow",
    "Straggler",
    "StragglerAnalysis",
]
