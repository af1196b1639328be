"""PyTorch profiler (Kineto) traces -> :class:`RankTrace`.

Both schemas are read: the current one (``cat`` = ``kernel``, ``gpu_memcpy``,
``gpu_memset``, ``cuda_runtime``, ``cuda_driver``, ``cpu_op``, ``user_annotation``,
``python_function``) and the old one (``Kernel``, ``Memcpy``, ``Memset``, ``Runtime``,
``Operator``; ``tid`` strings such as ``"stream 7"``), from CUDA and ROCm alike.

Device events are the kernels, copies and memsets; their ``pid`` is the GPU index (a
trace holding several GPUs keeps the one with most events, with a warning). Host events
are framework ops, runtime/driver calls and annotations of the CPU process(es), plus the
``python_function`` frames that classification recognizes (data loading, cache flushes):
plain Python frames, most of a ``with_stack`` trace, are left out. ``gpu_user_annotation``
duplicates of host annotations, flows and metadata are not rows. Kernels are tied to the
runtime call that launched them by ``args.correlation``. Communication kernels are tied to
the host ops around their launch (see :mod:`gpuprof.readers.launch`), which gives them a
collective name, process group and message size in bytes where the kernel itself does not
carry them, and decides whether an ambiguous ``SendRecv``/``Generic`` kernel is a
collective or point-to-point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from gpuprof.model import classify as cl
from gpuprof.model.table import Cat, Table
from gpuprof.model.timeline import (
    DEVICE_COLUMNS,
    HOST_COLUMNS,
    Category,
    CopyKind,
    Kind,
    MemorySample,
    ProcessGroup,
    Step,
    TraceHolds,
    build_table,
)
from gpuprof.readers.accumulate import DeviceColumns, HostColumns, RowStrings
from gpuprof.readers.columns import as_int
from gpuprof.readers.events import Event
from gpuprof.readers.jsonio import RawTrace
from gpuprof.readers.launch import resolve_comm_kernels
from gpuprof.readers.stepmarkers import find_steps, marker_note
from gpuprof.readers.timecheck import TimeChecks

# What a Kineto trace records: kernels with the host calls that launched them, on streams
# (TraceHolds' defaults).
KINETO_HOLDS = TraceHolds(title="Kineto trace")

DEVICE_CATS: dict[str, Kind] = {
    "kernel": Kind.KERNEL,
    "Kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "Memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "Memset": Kind.MEMSET,
}
HOST_CATS: dict[str, Kind] = {
    "cuda_runtime": Kind.RUNTIME,
    "Runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "Driver": Kind.DRIVER,
    "xpu_runtime": Kind.RUNTIME,  # Intel GPUs, same layout
    "xpu_driver": Kind.DRIVER,
    "privateuse1_runtime": Kind.RUNTIME,  # out-of-tree backends
    "privateuse1_driver": Kind.DRIVER,
    "cpu_op": Kind.OP,
    "Operator": Kind.OP,
    "user_annotation": Kind.ANNOTATION,
    "python_function": Kind.PYTHON,
}
# cat values that only Kineto writes: how a file is recognized as a Kineto trace.
KINETO_CATS = (
    frozenset(DEVICE_CATS) | frozenset(HOST_CATS) | {"gpu_user_annotation", "ac2g", "cpu_instant_event"}
)


@dataclass
class KinetoFacts:
    """What a Kineto trace says about its rank, besides the event tables (filled in while
    reading; ``None`` where the trace does not say)."""

    rank: int | None = None
    device_index: int | None = None
    device_name: str | None = None
    device_memory_bytes: int | None = None
    world_size: int | None = None
    process_groups: tuple[ProcessGroup, ...] = ()
    python_stacks: bool = False  # recorded with_stack=True (see RankTrace.python_stacks)
    step_marker: str | None = None  # what the steps come from (see readers.stepmarkers)
    device_pids: dict[Any, int] = field(default_factory=dict)  # device events per GPU pid
    warnings: list[str] = field(default_factory=list)


def looks_like_kineto(raw: RawTrace) -> bool:
    """True when the content is a Kineto trace (by its top-level keys and ``cat`` values).

    Only the first piece of a large trace is looked at: it holds thousands of events.
    """
    if raw.top.device_properties is not None or raw.top.schema_version is not None:
        return True
    return any(e.cat in KINETO_CATS for e in raw.first)


def read_kineto(
    raw: RawTrace,
) -> tuple[Table, Table, tuple[Step, ...], tuple[MemorySample, ...], KinetoFacts]:
    """Device table, host table, steps, memory samples and facts of one Kineto trace.

    Consumes ``raw``'s pieces. Events whose times cannot be times are dropped and counted
    (one warning per kind, see :mod:`gpuprof.readers.timecheck`).
    """
    facts = KinetoFacts()
    checks = TimeChecks()
    host_cols = HostColumns(_HOST_KIND_CODES, checks)
    dev_cols = DeviceColumns(_DEVICE_KIND_CODES, checks)
    mem: list[Event] = []
    frame_verdicts: dict[str, bool] = {}
    dev_cats = DEVICE_CATS
    host_cats = HOST_CATS
    for piece in raw.pieces():
        # A plain loop: measured 4x faster here than routing with map/np.fromiter passes
        # (about 90 ns an event on CPython 3.11; see benchmarks/README.md).
        dev: list[Event] = []
        host: list[Event] = []
        frames: list[Event] = []
        for e in piece:
            if e.ph == "X":
                c = e.cat
                if c in dev_cats:
                    dev.append(e)
                elif c == "python_function":
                    frames.append(e)
                elif c in host_cats:
                    host.append(e)
            elif e.name == "[memory]":
                mem.append(e)
        del piece
        if frames:
            facts.python_stacks = True
            host.extend(_telling_frames(frames, frame_verdicts))
        host_cols.add(host)
        dev_cols.add(dev)
    facts.warnings.extend(raw.warnings)
    pid_counts = facts.device_pids = dev_cols.pid_counts()
    if raw.cut_off_at_bytes is not None and not pid_counts:
        # Older Kineto traces write the GPU events after all host events: a file cut off
        # mid-write can hold none of them, which does not make the job CPU-only.
        said = raw.cut_off_note
        told = (
            f"{said}, none of them GPU events: GPU events may be missing (older traces write "
            "them last), so the trace is not known to be CPU-only"
        )
        facts.warnings[:] = [told if w == said else w for w in facts.warnings]
    keep_pid = _own_device(pid_counts, facts)
    facts.python_stacks = facts.python_stacks or _said_yes(raw.top.with_stack)
    _read_distributed(raw.top.distributed_info, facts)
    _read_device_props(raw.top.device_properties, facts)
    host_table = _host_table(host_cols.finish())
    device_table = _device_table(dev_cols.finish(keep_pid), host_table)
    steps, facts.step_marker = find_steps(host_table)
    note = marker_note(steps, facts.step_marker)
    if note:
        facts.warnings.append(note)
    memory = _memory(mem, facts.device_index, checks)
    facts.warnings.extend(checks.warnings())
    return device_table, host_table, steps, memory, facts


def _telling_frames(frames: list[Event], verdicts: dict[str, bool]) -> list[Event]:
    """The Python frames whose name gives them a category (data loading, cache flushes...).

    ``with_stack`` traces hold a ``python_function`` event per Python call, often most of
    the file; the framework ops and runtime calls already cover the same host time, and
    only frames that classification recognizes tell the analysis anything more. Keeping
    only those keeps reading fast and memory small on such traces. ``verdicts`` caches
    the decision per name across pieces.
    """
    if not frames:
        return frames
    for n in set(map(_NAME, frames)) - verdicts.keys():
        verdicts[n] = cl.classify(Kind.PYTHON, n) != Category.OTHER
    if not any(verdicts.values()):
        return []
    return [e for e in frames if verdicts[e.name]]


def _said_yes(flag: Any) -> bool:
    """A top-level flag such as ``with_stack``: Kineto writes 1 / 0, others true / false."""
    if isinstance(flag, str):
        return flag.strip().lower() in ("1", "true", "yes")
    return isinstance(flag, (bool, int, float)) and bool(flag)


def _own_device(counts: dict[Any, int], facts: KinetoFacts) -> Any:
    """The ``pid`` of the rank's own GPU: the one with most device events."""
    if not counts:
        return None
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    pid, n = ranked[0]
    facts.device_index = as_int(pid)
    if len(ranked) > 1:
        others = ", ".join(f"{p} ({m} events)" for p, m in ranked[1:])
        facts.warnings.append(
            f"the trace holds events of several GPUs; kept GPU {pid} ({n} events), dropped {others}"
        )
    return pid


def _read_distributed(info: Any, facts: KinetoFacts) -> None:
    if not isinstance(info, dict):
        return
    facts.rank = _said_int(info, "rank", facts)
    facts.world_size = _said_int(info, "world_size", facts)
    groups: list[ProcessGroup] = []
    configs = info.get("pg_config")
    for pg in configs if isinstance(configs, list) else ():  # a number or a string: no groups
        if not isinstance(pg, dict):
            continue
        ranks = pg.get("ranks")
        ranks_t = (
            tuple(r for r in (as_int(x) for x in ranks) if r is not None) if isinstance(ranks, list) else ()
        )
        desc = pg.get("pg_desc")
        groups.append(ProcessGroup(str(pg.get("pg_name", "")), None if desc is None else str(desc), ranks_t))
    facts.process_groups = tuple(groups)


def _said_int(info: dict[str, Any], key: str, facts: KinetoFacts) -> int | None:
    """``distributedInfo[key]`` as a non-negative integer; anything else is unknown, with a
    warning when the key is there (``"rank": "²"`` or a 5000-digit string)."""
    value = info.get(key)
    n = as_int(value)
    if n is not None and n < 2**31:
        return n  # negative: "not distributed", as some producers write it
    if value is not None:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        facts.warnings.append(f"distributedInfo.{key} {shown} is not a {key} number; ignored")
    return None


def _read_device_props(props: Any, facts: KinetoFacts) -> None:
    if not isinstance(props, list) or not props:
        return
    entries = [p for p in props if isinstance(p, dict)]
    chosen = None
    if facts.device_index is not None:
        chosen = next((p for p in entries if as_int(p.get("id")) == facts.device_index), None)
    if chosen is None and len(entries) == 1:
        chosen = entries[0]
    if chosen is None:
        return
    name = chosen.get("name")
    facts.device_name = name if isinstance(name, str) and name else None
    facts.device_memory_bytes = as_int(chosen.get("totalGlobalMem"))


def _tid_column(tids: list[Any]) -> np.ndarray:
    """tids as int64; the old schema writes them as strings ("4093687616", "stream 7")."""
    mapping: dict[Any, int] = {}
    for t in set(tids):
        v = as_int(t)
        if v is None and isinstance(t, str):
            v = as_int(t.rsplit(" ", 1)[-1])
        mapping[t] = -1 if v is None or not -(2**63) <= v < 2**63 else v
    return np.array(list(map(mapping.__getitem__, tids)), np.int64)


_NAME = attrgetter("name")
_HOST_KIND_CODES = {k: int(v) for k, v in HOST_CATS.items()}
_DEVICE_KIND_CODES = {k: int(v) for k, v in DEVICE_CATS.items()}


def _host_table(cols: dict[str, Any]) -> Table:
    kind = cols["kind"]
    name: Cat = cols["name"]
    codes = np.asarray(name.codes)
    uniq = list(name.categories)
    n = len(kind)
    category = np.full(n, int(Category.OTHER), np.int8)
    if n:
        # Classify each (kind, name) pair present once: through a table indexed by the
        # pair when names are few next to rows (no sort of the rows), else np.unique.
        pairs = codes.astype(np.intp) * 32 + kind
        if len(uniq) * 32 <= 4 * n:
            present = np.flatnonzero(np.bincount(pairs, minlength=len(uniq) * 32))
            table = np.zeros(len(uniq) * 32, np.int8)
            table[present] = [int(cl.classify(Kind(p % 32), uniq[p // 32])) for p in present.tolist()]
            category = table[pairs]
        else:
            upairs, inverse = np.unique(pairs, return_inverse=True)
            cats = np.array([int(cl.classify(Kind(p % 32), uniq[p // 32])) for p in upairs.tolist()], np.int8)
            category = cats[inverse]
    # record_param_comms wraps both collectives and send/recv: its args decide.
    coll: Cat = cols["coll_name"]
    coll_codes = np.asarray(coll.codes)
    coll_names = list(coll.categories)
    for i in np.flatnonzero(category == int(Category.COLLECTIVE)):
        told = cl.collective_category(coll_names[coll_codes[i]])
        if told is not None:
            category[i] = int(told)
    cols["category"] = category
    _sort_by_start(cols)
    return build_table(cols, HOST_COLUMNS)


def _sort_by_start(cols: dict[str, Any]) -> None:
    """Put the rows in ``start_us`` order (stable, as :func:`build_table` would), one column
    at a time: sorting the finished table would copy all of it at once (the peak memory
    of reading a large trace)."""
    start = cols["start_us"]
    if len(start) < 2 or bool(np.all(start[1:] >= start[:-1])):
        return
    order = np.argsort(start, kind="stable")
    for key, col in cols.items():
        cols[key] = col[order]


def _device_table(cols: dict[str, Any], host_table: Table) -> Table:
    kind = cols["kind"]
    name: Cat = cols["name"]
    codes = np.asarray(name.codes)
    uniq = list(name.categories)
    n = len(kind)
    kernel_cat = np.array([int(cl.classify(Kind.KERNEL, s)) for s in uniq] or [0], np.int8)
    no_copy = (CopyKind.UNKNOWN, False)
    copy_parsed = [cl.parse_copy(s) if s.startswith("Memcpy") else no_copy for s in uniq]
    copy_kind_by_code = np.array([int(k) for k, _ in copy_parsed] or [0], np.int8)
    pageable_by_code = np.array([p for _, p in copy_parsed] or [False], bool)
    is_kernel = kind == int(Kind.KERNEL)
    is_copy = kind == int(Kind.MEMCPY)
    category = np.where(
        is_kernel,
        kernel_cat[codes] if n else kernel_cat[:0],
        np.where(is_copy, int(Category.COPY), int(Category.MEMSET)),
    ).astype(np.int8)
    copy_kind = np.where(
        is_copy, copy_kind_by_code[codes] if n else copy_kind_by_code[:0], int(CopyKind.NONE)
    ).astype(np.int8)
    pageable = is_copy & (pageable_by_code[codes] if n else pageable_by_code[:0])
    coll: RowStrings = cols["coll_name"]
    pg: RowStrings = cols["pg"]
    comm = np.flatnonzero((category == int(Category.COLLECTIVE)) | (category == int(Category.P2P)))
    if comm.size:
        names = {r: uniq[c] for r, c in zip(comm.tolist(), codes[comm].tolist())}
        resolve_comm_kernels(comm, names, cols["correlation"], category, coll, pg, cols["bytes"], host_table)
    cols.update(
        category=category,
        copy_kind=copy_kind,
        pageable=pageable,
        coll_name=coll.to_cat(),
        pg=pg.to_cat(),
    )
    _sort_by_start(cols)
    return build_table(cols, DEVICE_COLUMNS)


def _memory(mem: list[Event], device_index: int | None, checks: TimeChecks) -> tuple[MemorySample, ...]:
    """``[memory]`` instant events of the rank's GPU (allocated / reserved bytes)."""
    out: list[MemorySample] = []
    if mem:
        keep = checks.usable(np.fromiter((e.ts for e in mem), np.float64, len(mem)))
        if keep is not None:
            mem = [e for e, k in zip(mem, keep.tolist()) if k]
    for e in mem:
        a = e.args
        dev_id = as_int(a.device_id)
        if dev_id is None or dev_id < 0:
            continue  # CPU memory
        if device_index is not None and dev_id != device_index:
            continue
        out.append(MemorySample(e.ts, as_int(a.total_allocated), as_int(a.total_reserved)))
    out.sort(key=lambda m: m.ts_us)
    return tuple(out)
