"""The one timeline model that every reader produces and every analysis consumes.

A trace is turned into one :class:`RankTrace` per rank (or per worker of an op-level
timeline). Events live in two tables with fixed columns, so that analysis code can work
vectorized and never needs to know which file format the events came from. Readers build
them as :class:`gpuprof.model.table.Table` (numpy columns: the analysis reads them as
``trace.device_cols`` / ``trace.host_cols`` and never imports pandas); ``trace.device`` and
``trace.host`` give the same tables as pandas DataFrames, made on first use:

``device`` (what ran on the GPU, or for an op-level timeline, what the worker was doing)
    ``start_us``, ``end_us`` (float64, microseconds on the trace's own clock),
    ``kind`` (int8, :class:`Kind`), ``category`` (int8, :class:`Category`),
    ``stream`` (int64, -1 unknown), ``correlation`` (int64, -1 unknown: the id shared with
    the host runtime call that launched it), ``name`` (pandas categorical),
    ``copy_kind`` (int8, :class:`CopyKind`), ``pageable`` (bool: a copy from or to pageable
    host memory), ``bytes`` (int64, -1 unknown: bytes a copy or memset moves; for a
    communication kernel, its message, the larger of input and output), ``coll_name``
    (categorical, "" unknown: the collective as named by the profiler, e.g.
    ``allreduce``), ``pg`` (categorical, "" unknown: process group name), ``mb_id`` and
    ``step`` (int64, -1 unknown: microbatch and step numbers where an op-level timeline
    records them).

``host`` (what the CPU threads of that rank were doing)
    ``start_us``, ``end_us``, ``kind``, ``category``, ``tid`` (int64),
    ``correlation`` (int64, -1 unknown), ``name`` (categorical), ``pg``, ``coll_name``,
    ``bytes`` (int64, -1 unknown: message bytes of a communication op such as
    ``record_param_comms``).

Tables are never mutated after construction; analysis code copies what it changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

from gpuprof.model.notice import Notice
from gpuprof.model.table import Cat, FrameField, Table

if TYPE_CHECKING:  # pandas is imported only when a DataFrame is asked for
    import pandas as pd


class Kind(IntEnum):
    """What sort of record an event is (independent of what it does)."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    GPU_ANNOTATION = 3
    OP = 10  # framework operator (cpu_op / Operator)
    RUNTIME = 11  # CUDA / HIP runtime API call
    DRIVER = 12  # CUDA / HIP driver API call
    ANNOTATION = 13  # user_annotation / record_function ranges
    PYTHON = 14  # python_function frames
    TIMER = 20  # op-level timeline entry from a framework's own timers


class Category(IntEnum):
    """What an event does; decided by :mod:`gpuprof.model.classify`, in one place."""

    COMPUTE = 0
    COLLECTIVE = 1  # all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, ...
    P2P = 2  # point-to-point send / recv
    COPY = 3  # host<->device, device<->device copies
    MEMSET = 4
    SYNC = 5  # host blocks on the device
    ALLOC = 6  # device memory allocation / release
    DATALOAD = 7  # host waits for input data
    LAUNCH = 8  # kernel / copy launch API calls
    STEP = 9  # ProfilerStep#N and similar step markers
    OTHER = 10  # everything else (plain host ops, annotations, ...)


class CopyKind(IntEnum):
    NONE = 0  # not a copy
    HTOD = 1
    DTOH = 2
    DTOD = 3
    HTOH = 4
    PTOP = 5
    UNKNOWN = 6


DEVICE_COLUMNS: tuple[str, ...] = (
    "start_us",
    "end_us",
    "kind",
    "category",
    "stream",
    "correlation",
    "name",
    "copy_kind",
    "pageable",
    "bytes",
    "coll_name",
    "pg",
    "mb_id",
    "step",
)
HOST_COLUMNS: tuple[str, ...] = (
    "start_us",
    "end_us",
    "kind",
    "category",
    "tid",
    "correlation",
    "name",
    "pg",
    "coll_name",
    "bytes",  # message bytes of a communication op (record_param_comms); -1 otherwise
)

_DTYPES: Mapping[str, str] = {
    "start_us": "float64",
    "end_us": "float64",
    "kind": "int8",
    "category": "int8",
    "stream": "int64",
    "correlation": "int64",
    "name": "category",
    "copy_kind": "int8",
    "pageable": "bool",
    "bytes": "int64",
    "coll_name": "category",
    "pg": "category",
    "mb_id": "int64",
    "step": "int64",
    "tid": "int64",
}

_DEFAULTS: Mapping[str, object] = {
    "stream": -1,
    "correlation": -1,
    "copy_kind": int(CopyKind.NONE),
    "pageable": False,
    "bytes": -1,
    "coll_name": "",
    "pg": "",
    "mb_id": -1,
    "step": -1,
    "tid": -1,
    "category": int(Category.OTHER),
}


def build_table(columns: Mapping[str, object], schema: tuple[str, ...]) -> Table:
    """Build a device or host table from column arrays/lists.

    ``start_us``, ``end_us``, ``kind`` and ``name`` are required; any other column of the
    schema that is missing is filled with its "unknown" default. Rows are sorted by
    ``start_us`` (stable) so that analysis can rely on the order. Categorical columns may
    be given as a :class:`Cat`, a pandas Categorical or a list of values.
    """
    missing = [c for c in ("start_us", "end_us", "kind", "name") if c not in columns]
    if missing:
        raise ValueError(f"make_table: missing required columns {missing}")
    n = len(columns["start_us"])  # type: ignore[arg-type]
    data: dict[str, object] = {}
    for col in schema:
        dtype = _DTYPES[col]
        if col in columns:
            data[col] = _column(columns[col], dtype)
        elif dtype == "category":
            data[col] = Cat(np.zeros(n, np.int8), [_DEFAULTS[col]] if n else [])
        else:
            data[col] = np.full(n, _DEFAULTS[col], dtype=dtype)
    table = Table(data, schema)
    start = data["start_us"]
    if n > 1 and not bool(np.all(start[1:] >= start[:-1])):  # type: ignore[index]
        table = table.take(np.argsort(start, kind="stable"))  # type: ignore[arg-type]
    return table


# Source kinds of arrays that convert exactly to a column of each kind.
_SAFE_KINDS: Mapping[str, str] = {"f": "fiu", "i": "iub", "b": "b"}


def make_table(columns: Mapping[str, object], schema: tuple[str, ...]) -> pd.DataFrame:
    """:func:`build_table` as a pandas DataFrame."""
    return build_table(columns, schema).to_pandas()


def _column(values: object, dtype: str) -> object:
    """``values`` as the array of a column of ``dtype``: as given when it already is one,
    else converted the way a pandas Series of that dtype converts it."""
    if dtype == "category":
        if isinstance(values, Cat):
            return values
        if type(values).__name__ == "Categorical":
            return Cat(values.codes, list(values.categories))  # type: ignore[attr-defined]
        return Cat.from_values(values)  # type: ignore[arg-type]
    if isinstance(values, np.ndarray) and values.dtype == np.dtype(dtype) and values.ndim == 1:
        return values
    if isinstance(values, (np.ndarray, list, tuple)):
        arr = np.asarray(values)
        # Conversions that cannot lose or invent anything; pandas judges the others.
        if arr.ndim == 1 and (arr.size == 0 or arr.dtype.kind in _SAFE_KINDS[np.dtype(dtype).kind]):
            return arr.astype(dtype)
    import pandas as pd

    return pd.Series(values, dtype=dtype).to_numpy()


def empty_device_table() -> pd.DataFrame:
    return make_table({"start_us": [], "end_us": [], "kind": [], "name": []}, DEVICE_COLUMNS)


def empty_host_table() -> pd.DataFrame:
    return make_table({"start_us": [], "end_us": [], "kind": [], "name": []}, HOST_COLUMNS)


def empty_device() -> Table:
    """An empty device table (a :class:`Table`)."""
    return build_table({"start_us": [], "end_us": [], "kind": [], "name": []}, DEVICE_COLUMNS)


def empty_host() -> Table:
    """An empty host table (a :class:`Table`)."""
    return build_table({"start_us": [], "end_us": [], "kind": [], "name": []}, HOST_COLUMNS)


# A table's columns as numpy arrays: :attr:`RankTrace.device_cols` / ``host_cols``.
Columns = Table


@dataclass(frozen=True)
class Step:
    """One training step as marked in the trace (``ProfilerStep#N`` or a timer's step)."""

    number: int
    start_us: float
    end_us: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class ProcessGroup:
    name: str
    description: str | None
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class MemorySample:
    """A point of the ``[memory]`` instant events of a Kineto trace, or a sampled value."""

    ts_us: float
    allocated_bytes: int | None
    reserved_bytes: int | None


@dataclass(frozen=True)
class TraceHolds:
    """What a trace format records, as the analysis needs to know it: set by the reader,
    so that no analysis code asks which format a trace came from (``RankTrace.fmt`` only
    names it, for the report). The defaults are what a Kineto trace holds; a reader of
    another format sets the ones that differ.

    ``title``: the format in words (``"Kineto trace"``), ``None`` to write ``fmt`` itself.

    ``launch_calls``: the format records the host call that launched each device event
    (matched by ``correlation``): device work without one is a filtered or sampled export
    (:mod:`gpuprof.accounting.evidence`), and launch times order the replay's graph.
    ``False`` for framework timers: no launch is missing when none is found.

    ``op_spans``: device events are framework ops timed on the host (kind ``TIMER``, named
    ``forward-compute``, ``grads-reduce-scatter``, ...), not kernels: phases come from the
    op names, ops of one thread may overlap (the replay lays them out on lanes), and an op
    is known by its name across workers (the op-level replay, :mod:`gpuprof.job.opdag`).

    ``reader_ends_steps``: the reader ended each step early exactly where the time after it
    is not the job's (:mod:`gpuprof.readers.timersteps`): the time between two steps is
    left out of the window even when their numbers are consecutive.

    ``untimed_waits``: a communication op spans only its transfer, and timers may start
    behind a barrier: waiting for the peers is an untimed gap before the op, measured from
    when the worker was ready (:mod:`gpuprof.job.untimed`, :mod:`gpuprof.job.barriers`).

    ``whole_groups``: process groups are derived from the parallel layout and the file
    holds every worker it recorded: the members present are the whole group (a Kineto
    trace's group may have members in files not given).

    ``tp_peers_optional``: a worker that states its pipeline position (``pp_rank``) may be
    the one tensor-parallel rank kept of its (data-parallel, pipeline) position, as
    Megatron's timer exports keep: its tensor-parallel peers are not missing ranks.
    """

    title: str | None = None
    launch_calls: bool = True
    op_spans: bool = False
    reader_ends_steps: bool = False
    untimed_waits: bool = False
    whole_groups: bool = False
    tp_peers_optional: bool = False


@dataclass(frozen=True)
class RankTrace:
    """Everything known about one rank (or one worker of an op-level timeline).

    ``rank`` is the global rank; ``source`` the file it came from. ``device_name`` and
    ``device_memory_bytes`` are ``None`` when the trace does not say. ``fmt`` names the
    reader (``kineto`` or ``timeline``), for the report; ``holds`` says what such a trace
    records (:class:`TraceHolds`), which is what the analysis asks. ``parallel`` carries what the trace says about the
    parallel layout, e.g. ``{"pp_rank": 1, "tp_rank": 0, "dp_rank": 0, "pp_size": 4}``.
    """

    rank: int
    source: str
    fmt: str
    # Required (the descriptor has no default). Given as a Table or a DataFrame; read as a
    # DataFrame (pandas is imported then), or without pandas as device_cols / host_cols.
    device: FrameField = FrameField()  # noqa: RUF009 (a descriptor, made once per class)
    host: FrameField = FrameField()  # noqa: RUF009
    steps: tuple[Step, ...] = ()
    device_name: str | None = None
    device_memory_bytes: int | None = None
    world_size: int | None = None
    process_groups: tuple[ProcessGroup, ...] = ()
    memory: tuple[MemorySample, ...] = ()
    parallel: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    # Warnings some code recognises, as records (gpuprof.model.notice): the guessed rank.
    # They follow ``warnings`` in the report.
    notices: tuple[Notice, ...] = ()
    # Index of the GPU the device events came from (Kineto's device ``pid``); None if unknown.
    device_index: int | None = None
    # The file was cut off mid-write and only the events before the cut were read: what is
    # absent (e.g. GPU events, which older Kineto traces write last) may just be missing.
    truncated: bool = False
    # The profiler recorded Python stacks (``with_stack=True``: ``python_function`` events or
    # the trace's ``with_stack`` key), which slows the host while profiling. Readers drop
    # most of those frames, so the host table alone does not tell.
    python_stacks: bool = False
    # What marks the steps: ``ProfilerStep#N``, or the marker used in its place (e.g.
    # ``Optimizer.step#SGD.step``, see :mod:`gpuprof.readers.stepmarkers`); ``None`` when
    # the reader found none or has its own notion of steps (op-level timelines).
    step_marker: str | None = None
    # What the format records (the analysis branches on this, never on fmt).
    holds: TraceHolds = field(default_factory=TraceHolds)

    @property
    def has_device_activity(self) -> bool:
        return len(self.device_cols) > 0

    @property
    def device_cols(self) -> Table:
        """The device table as numpy columns, without pandas (see :class:`Table`)."""
        return RankTrace.__dict__["device"].table(self)  # type: ignore[no-any-return]

    @property
    def host_cols(self) -> Table:
        """The host table as numpy columns, without pandas (see :class:`Table`)."""
        return RankTrace.__dict__["host"].table(self)  # type: ignore[no-any-return]
