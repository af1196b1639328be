"""Compact per-rank results: what the cross-rank analysis and the advice work from.

A :class:`RankSummary` is small (interval arrays and a few tables of collective calls) so
that hundreds of ranks can be summarized one at a time, in parallel or on a cluster, and
only the summaries are ever held together. It is plain data: picklable, no file handles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gpuprof.accounting.factrecord import RankFacts
from gpuprof.accounting.graph import RankGraph
from gpuprof.accounting.host_steps import HostSteps
from gpuprof.accounting.names import NameTrack
from gpuprof.model.intervals import Intervals, total
from gpuprof.model.notice import Notice
from gpuprof.model.report import Cause
from gpuprof.model.table import FrameField, Table
from gpuprof.model.timeline import Step, TraceHolds

# Columns of RankSummary.comms, one row per collective or point-to-point call on the device:
#   start_us, end_us   (float64) device interval of the call (first kernel start, last end)
#   category           (int8)    Category.COLLECTIVE or Category.P2P
#   name               (str)     kernel name (trimmed) or op name
#   coll_name          (str)     collective name if known ("allreduce", "alltoall", ...), else ""
#   pg                 (str)     process group name if known, else ""
#   seq                (int64)   order of this call among this rank's calls of the same pg
#   bytes              (int64)   message size if known, else -1
#   launch_us          (float64) host time the call was issued (runtime launch), NaN unknown
#   step               (int64)   step number the call belongs to, -1 unknown
#   mb_id              (int64)   microbatch id (op-level timelines), -1 unknown
#   peer               (int64)   peer rank of a point-to-point call if known, else -1
COMMS_COLUMNS: tuple[str, ...] = (
    "start_us",
    "end_us",
    "category",
    "name",
    "coll_name",
    "pg",
    "seq",
    "bytes",
    "launch_us",
    "step",
    "mb_id",
    "peer",
)


@dataclass(frozen=True)
class RankSummary:
    """One rank, reduced to what the job-level analysis needs.

    ``window`` is ``(start_us, end_us)``, the outer bounds of the analysis window;
    ``window_iv``, when set, is the window itself as a normalized interval set (the
    profiled steps, when time between them is left out: see
    :mod:`gpuprof.accounting.window`), ``None`` meaning all of ``window``. ``compute`` and
    ``lost`` are normalized interval sets that partition the window exactly, so
    ``window_us`` (the time inside it) is their summed length; shares of the window are
    shares of ``window_us``, never of ``window[1] - window[0]``. ``claims`` holds, for each cause a local rule found
    evidence for, the intervals that rule claims (they may reach outside ``lost``; the
    attribution keeps only the lost part). ``facts`` carries measured numbers for the
    advice (a :class:`~gpuprof.accounting.factrecord.RankFacts`, each field documented
    there; ``None`` for a rank with nothing to analyze). ``host_steps``: what such a rank
    (CPU-only) still measured of its steps on the host (``None``: no step marked, or an
    analyzed rank).
    """

    rank: int
    source: str
    fmt: str
    device_name: str | None
    device_memory_bytes: int | None
    window: tuple[float, float]
    steps: tuple[Step, ...]
    compute: Intervals
    lost: Intervals
    claims: Mapping[Cause, Intervals]
    # Required (the descriptor has no default). Given as a Table or a DataFrame; read as a
    # DataFrame (pandas is imported then), or without pandas as comms_table.
    comms: FrameField = FrameField()  # noqa: RUF009 (a descriptor, made once per class)
    parallel: Mapping[str, int] = field(default_factory=dict)
    world_size: int | None = None
    process_groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    phases_us: Mapping[str, float] = field(default_factory=dict)
    facts: RankFacts | None = None
    host_steps: HostSteps | None = None
    # The rank's warnings as records (gpuprof.model.notice), worded into the report's
    # warnings by the pipeline.
    warnings: tuple[Notice, ...] = ()
    empty_reason: str | None = None  # set when there is nothing to analyze (CPU-only trace)
    window_iv: Intervals | None = None
    # The rank's dependency graph for the job-level what-if replay (None: nothing to replay).
    graph: RankGraph | None = None
    # What ran when, by name (gpuprof.accounting.names), for the timeline's hover text.
    names: NameTrack | None = None
    # What the rank's trace format records (its trace's ``holds``): what the job-level
    # analysis asks instead of the format's name.
    holds: TraceHolds = field(default_factory=TraceHolds)

    @property
    def comms_table(self) -> Table:
        """``comms`` as numpy columns, without pandas (see :class:`gpuprof.model.table.Table`)."""
        return RankSummary.__dict__["comms"].table(self)  # type: ignore[no-any-return]

    @property
    def window_intervals(self) -> Intervals:
        """The window as a normalized interval set (one interval when contiguous)."""
        if self.window_iv is not None:
            return self.window_iv
        return np.array([self.window[0]]), np.array([self.window[1]])

    @property
    def step_count(self) -> int:
        """Steps in the window, at least one (a window without steps counts as one)."""
        return max(len(self.steps), 1)

    @property
    def window_us(self) -> float:
        """Time inside the window, microseconds (time left out between steps excluded)."""
        if self.window_iv is not None:
            return total(self.window_iv)
        return self.window[1] - self.window[0]

    @property
    def gaps_us(self) -> float:
        """Time between the outer bounds left out of the window (between steps), µs."""
        return (self.window[1] - self.window[0]) - self.window_us
