"""Op-level Chrome trace-event timelines from framework timers -> one RankTrace per worker.

These files are not Kineto: each ``X`` event is a framework timer op (``forward-compute``,
``backward-send``, ``grads-reduce-scatter``, ...) with ``args.step`` and ``args.mb_id``.

Begin/end pairs
    Timers may instead write a ``B`` event when an op begins and an ``E`` when it ends.
    They are paired per thread (``pid``, ``tid``) in file order as a stack (an ``E`` ends
    the latest open ``B`` of its thread, whatever its ``name``, which ``E`` may omit) and
    read as the ``X`` event they describe: name and category of the ``B``, its ``args``
    overridden by the ``E``'s where the ``E`` gives them. A ``B`` still open at the end
    of the file (the job was killed) is dropped and an ``E`` with nothing open is
    ignored, each with a warning.

Workers
    Megatron-style timelines name their threads ``PP rank k, TP rank t, <kind>`` and use
    ``pid`` as the data-parallel rank (or name the process ``DP rank [d]``); one worker is
    one (pid, PP rank, TP rank) and its threads are its lanes (compute, pp-comm, ...).
    Without such thread names, each process (``pid``) is one worker.

Global rank of a worker
    Megatron's default rank order (``tp-cp-ep-dp-pp``: TP varies fastest, PP slowest):
    ``rank = (pp_rank * dp_size + dp_rank) * tp_size + tp_rank``. Sizes come from a
    ``meta*.yaml`` beside the file when present (``key: int`` lines), else from the largest
    rank seen plus one. In the generic case the rank is the integer ``pid`` (or the
    worker's position when pids are not integers).

Tables
    The timer ops go to the ``device`` table (kind TIMER, category from the op name,
    ``step`` and ``mb_id`` from ``args``, ``stream`` = the thread id, i.e. the worker's
    lane: compute, pp-comm, ...); the ``host`` table is empty.

Steps
    Step ``s`` of a worker spans from its first op of step ``s`` to its first op of step
    ``s + 1``; when the next recorded step is not ``s + 1``, or the file's clock is
    stitched from separate recordings, it ends at its last op (see
    :mod:`gpuprof.readers.timersteps`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpuprof.model import classify as cl
from gpuprof.model.table import Cat, Table
from gpuprof.model.timeline import DEVICE_COLUMNS, Kind, RankTrace, TraceHolds, build_table, empty_host
from gpuprof.readers import timersteps as ts
from gpuprof.readers.accumulate import Coder, Parts, timed_piece, values
from gpuprof.readers.columns import as_int, int_column
from gpuprof.readers.events import NO_ARGS, NO_RAW, Args, Event
from gpuprof.readers.jsonio import RawTrace
from gpuprof.readers.timecheck import TimeChecks
from gpuprof.readers.timersteps import OpSpans

_THREAD_LAYOUT = re.compile(r"PP\s*rank\s*(\d+)\s*,\s*TP\s*rank\s*(\d+)", re.IGNORECASE)
_DP_IN_PROCESS = re.compile(r"DP\s*rank\s*\[?\s*(\d+)", re.IGNORECASE)
_META_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(-?\d+)\s*(?:#.*)?$")
_META_MAX_BYTES = 1 << 16
# What these timelines record (see the module docstring): framework timer ops, no launch
# calls; steps ended by the reader; transfers timed without the wait before them; groups
# from the layout, whole in the file; one tensor-parallel rank per position may be kept.
TIMELINE_HOLDS = TraceHolds(
    title="op-level timeline",
    launch_calls=False,
    op_spans=True,
    reader_ends_steps=True,
    untimed_waits=True,
    whole_groups=True,
    tp_peers_optional=True,
)
_NAME = attrgetter("name")
_FIRST = itemgetter(0)


@dataclass(frozen=True)
class _WorkerKey:
    pid: int | str
    pp_rank: int | None
    tp_rank: int | None


_META_MAX_DIGITS = 9  # sizes below a billion: ranks, stages, microbatches


def read_meta_sizes(trace_path: Path) -> dict[str, int]:
    """``key: int`` pairs of the ``meta*.yaml`` beside a timeline (no YAML library, no eval).

    ``timeline-ST.json.gz`` pairs with ``meta-ST.yaml``; otherwise a folder's only
    ``meta*.yaml`` is used. Lines that are not ``key: integer`` are ignored.
    """
    folder = trace_path.parent
    stem = trace_path.name.split(".", 1)[0]
    suffix = stem.split("-", 1)[1] if "-" in stem else None
    candidates = []
    if suffix:
        candidates += [folder / f"meta-{suffix}.yaml", folder / f"meta-{suffix}.yml"]
    metas = sorted(p for p in folder.glob("meta*.y*ml") if p.is_file())
    if len(metas) == 1:
        candidates.append(metas[0])
    for path in candidates:
        if path.is_file():
            try:  # at most the first _META_MAX_BYTES: an 8 GB sparse file is not read whole
                with open(path, "rb") as fh:
                    text = fh.read(_META_MAX_BYTES).decode("utf-8", "replace")
            except OSError:
                continue
            out: dict[str, int] = {}
            for line in text.splitlines():
                m = _META_LINE.match(line)
                # A size is a count of ranks or stages: more digits than any job has is no size.
                if m and len(m.group(2).lstrip("-+0")) <= _META_MAX_DIGITS:
                    out[m.group(1)] = int(m.group(2))
            return out
    return {}


def looks_like_timeline(raw: RawTrace) -> bool:
    """True when the file has complete (``X``) or begin (``B``) events at all: the
    fallback format."""
    return any(e.ph == "X" or e.ph == "B" for e in raw.first)


_ARG_FIELDS = tuple(Args.__struct_fields__)


class _Pairs:
    """Begin/end (``B``/``E``) events paired per thread into complete ops.

    Ops are kept with the position of their ``B`` in the file and handed out in that
    order, so that a timeline written with ``B``/``E`` reads exactly as the same timeline
    written with ``X`` events (ops that start together keep the outer one first).
    """

    def __init__(self) -> None:
        self.open: dict[tuple[Any, Any], list[tuple[int, Event]]] = {}
        self.done: list[tuple[int, Event]] = []
        self.seen = 0  # B events so far: the position of the next one
        self.unmatched_ends = 0
        self.first_unmatched_end: Event | None = None

    def begin(self, e: Event) -> None:
        self.open.setdefault((e.pid, e.tid), []).append((self.seen, e))
        self.seen += 1

    def end(self, e: Event) -> None:
        stack = self.open.get((e.pid, e.tid))
        if not stack:
            self.unmatched_ends += 1
            if self.first_unmatched_end is None:
                self.first_unmatched_end = e
            return
        pos, b = stack.pop()
        self.done.append(
            (pos, msgspec.structs.replace(b, ph="X", dur=e.ts - b.ts, args=_merged(b.args, e.args)))
        )

    def ops(self) -> list[Event]:
        """The paired ops, in the file order of their ``B`` events."""
        self.done.sort(key=_FIRST)
        return [op for _, op in self.done]

    def warnings(self) -> list[str]:
        out = []
        still_open = sorted((pos, b) for stack in self.open.values() for pos, b in stack)
        if still_open:
            b = still_open[0][1]
            out.append(
                f"{len(still_open)} begin ('B') event(s) never ended (the job was killed?) were dropped, "
                f"the first '{b.name}' at {b.ts:.0f} µs on pid {b.pid} tid {b.tid}"
            )
        e = self.first_unmatched_end
        if e is not None:
            out.append(
                f"{self.unmatched_ends} end ('E') event(s) without a begin were ignored, "
                f"the first at {e.ts:.0f} µs on pid {e.pid} tid {e.tid}"
            )
        return out


def _merged(begin: Args, end: Args) -> Args:
    """The ``B``'s args, each overridden by the ``E``'s when the ``E`` gives it."""
    if end is NO_ARGS:
        return begin
    given = {f: v for f in _ARG_FIELDS if (v := getattr(end, f)) is not None and v is not NO_RAW}
    return msgspec.structs.replace(begin, **given) if given else begin


class _Ops:
    """Timer ops of all pieces as columns (names, pids and tids as codes)."""

    def __init__(self, checks: TimeChecks) -> None:
        self.checks = checks
        self.names, self.pids, self.tids = Coder(), Coder(), Coder()
        self._p = Parts(("start", "end", "name", "pid", "tid", "step", "mb"))

    def add(self, ops: list[Event]) -> None:
        piece = timed_piece(ops, self.checks)
        if piece is None:
            return
        ops, start, dur, args = piece
        self._p.add(
            start=start,
            end=start + dur,
            name=self.names.encode(list(map(_NAME, ops))),
            pid=self.pids.encode(values(ops, "pid")),
            tid=self.tids.encode(values(ops, "tid")),
            step=int_column(values(args, "step")),
            mb=int_column(values(args, "mb_id")),
        )

    def column(self, key: str, dtype: Any) -> np.ndarray:
        return self._p.joined(key, dtype)

    def lanes(self) -> tuple[list[tuple[Any, Any]], np.ndarray]:
        """The distinct (pid, tid) threads and, per op, the index of its thread."""
        pid = self.column("pid", np.int32).astype(np.int64)
        tid = self.column("tid", np.int32).astype(np.int64)
        pair, lane = np.unique(pid * (len(self.tids.index) + 1) + tid, return_inverse=True)
        pids, tids = self.pids.labels(), self.tids.labels()
        width = len(self.tids.index) + 1
        return [(pids[int(x // width)], tids[int(x % width)]) for x in pair], lane.reshape(-1)


def read_timeline(raw: RawTrace, path: Path) -> list[RankTrace]:
    """One :class:`RankTrace` per worker of an op-level timeline, sorted by rank."""
    thread_names: dict[tuple[Any, Any], str] = {}
    process_names: dict[Any, str] = {}
    checks = TimeChecks()
    ops = _Ops(checks)
    pairs = _Pairs()
    for piece in raw.pieces():
        xs: list[Event] = []
        for e in piece:
            if e.ph == "X":
                xs.append(e)
            elif e.ph == "B":
                pairs.begin(e)
            elif e.ph == "E":
                pairs.end(e)
            elif e.ph == "M" and isinstance(e.args.name, str):
                if e.name == "thread_name":
                    thread_names[(e.pid, e.tid)] = e.args.name
                elif e.name == "process_name":
                    process_names[e.pid] = e.args.name
        del piece
        ops.add(xs)
    ops.add(pairs.ops())
    layout: dict[tuple[Any, Any], tuple[int, int]] = {}
    for key, tname in thread_names.items():
        m = _THREAD_LAYOUT.search(tname)
        if m:
            layout[key] = (int(m.group(1)), int(m.group(2)))
    # Each lane (pid, tid) belongs to one worker; rows are grouped by worker with a sort.
    lanes, lane = ops.lanes()
    keys: dict[_WorkerKey, int] = {}
    lane_worker = []
    for pid, tid in lanes:
        pp_tp = layout.get((pid, tid))
        wk = _WorkerKey(pid, pp_tp[0], pp_tp[1]) if pp_tp else _WorkerKey(pid, None, None)
        lane_worker.append(keys.setdefault(wk, len(keys)))
    groups = list(keys)
    dp_of = {pid: _dp_rank(pid, process_names.get(pid)) for pid in {k.pid for k in groups}}
    sizes = read_meta_sizes(path)
    warnings = list(raw.warnings) + pairs.warnings() + checks.warnings()
    structured = bool(layout)
    pp_size = tp_size = dp_size = 1
    if structured and groups:  # thread names, but every op was dropped: no workers
        pp_size = sizes.get("pp_size") or 1 + max((k.pp_rank or 0) for k in groups)
        tp_size = sizes.get("tp_size") or 1 + max((k.tp_rank or 0) for k in groups)
        dp_size = sizes.get("dp_size") or 1 + max((d or 0) for d in dp_of.values())
        unnamed = sorted({str(k.pid) for k in groups if k.pp_rank is None})
        if unnamed:
            warnings.append(
                f"ops on threads without 'PP rank k, TP rank t' names in process(es) {', '.join(unnamed)}; "
                "ranks are numbered in file order instead of Megatron's order"
            )
    ranks = _assign_ranks(groups, dp_of, structured, pp_size, tp_size, dp_size)
    world = sizes.get("world_size") or (pp_size * tp_size * dp_size if structured else None)
    worker = np.array(lane_worker or [0], np.int64)[lane] if len(lane) else np.zeros(0, np.int64)
    by_worker = np.argsort(worker, kind="stable")
    bounds = np.searchsorted(worker[by_worker], np.arange(len(groups) + 1))
    cols = {
        "start_us": ops.column("start", np.float64),
        "end_us": ops.column("end", np.float64),
        "name": ops.column("name", np.int32),
        "step": ops.column("step", np.int64),
        "mb_id": ops.column("mb", np.int64),
        "stream": np.array([_lane_tid(t) for _, t in lanes] or [-1], np.int64)[lane] if len(lane) else lane,
    }
    names = ops.names.labels()
    category_of = np.array([int(cl.classify(Kind.TIMER, s)) for s in names] or [0], np.int8)
    no_host = empty_host()  # shared: tables are never mutated
    built: list[tuple[_WorkerKey, dict[str, int], Table, OpSpans]] = []
    for w, wk in enumerate(groups):
        rows = by_worker[bounds[w] : bounds[w + 1]]
        parallel: dict[str, int] = {}
        if structured and wk.pp_rank is not None and wk.tp_rank is not None:
            parallel = {
                "pp_rank": wk.pp_rank,
                "tp_rank": wk.tp_rank,
                "pp_size": pp_size,
                "tp_size": tp_size,
                "dp_size": dp_size,
            }
            dp = dp_of[wk.pid]
            if dp is not None:
                parallel["dp_rank"] = dp
        device, spans = _worker_table({k: v[rows] for k, v in cols.items()}, names, category_of)
        built.append((wk, parallel, device, spans))
    # All workers of a file share its clock: whether it is stitched is decided once.
    all_jumps = [j for *_, spans in built for j in ts.jumps(spans)]
    real_clock = ts.stitched_jump(all_jumps) is None
    note = ts.steps_warning(all_jumps)
    if note:
        warnings.append(note)
    out: list[RankTrace] = [
        RankTrace(
            rank=ranks[wk],
            source=str(path),
            fmt="timeline",
            device=device,
            host=no_host,
            steps=ts.timer_steps(spans, real_clock),
            world_size=world,
            parallel=parallel,
            warnings=tuple(warnings),
            truncated=raw.cut_off_at_bytes is not None,
            holds=TIMELINE_HOLDS,
        )
        for wk, parallel, device, spans in built
    ]
    out.sort(key=lambda t: t.rank)
    return out


def _lane_tid(tid: Any) -> int:
    v = as_int(tid)
    return -1 if v is None or not -(2**63) <= v < 2**63 else v


def _dp_rank(pid: Any, process_name: str | None) -> int | None:
    if process_name:
        m = _DP_IN_PROCESS.search(process_name)
        if m:
            return int(m.group(1))
    return as_int(pid)


def _assign_ranks(
    groups: list[_WorkerKey],
    dp_of: dict[Any, int | None],
    structured: bool,
    pp_size: int,
    tp_size: int,
    dp_size: int,
) -> dict[_WorkerKey, int]:
    keys = list(groups)
    ranks: dict[_WorkerKey, int] = {}
    if structured and all(k.pp_rank is not None and dp_of[k.pid] is not None for k in keys):
        for k in keys:
            dp = dp_of[k.pid] or 0
            ranks[k] = ((k.pp_rank or 0) * dp_size + dp) * tp_size + (k.tp_rank or 0)
        if len(set(ranks.values())) == len(keys):
            return ranks
    pids = [as_int(k.pid) for k in keys]
    if not structured and all(p is not None and p >= 0 for p in pids) and len(set(pids)) == len(keys):
        return {k: int(p) for k, p in zip(keys, pids) if p is not None}
    ordered = sorted(keys, key=lambda k: (str(k.pid), k.pp_rank or 0, k.tp_rank or 0))
    return {k: i for i, k in enumerate(ordered)}


def _worker_table(
    cols: dict[str, np.ndarray], names: list[str], category_of: np.ndarray
) -> tuple[Table, OpSpans]:
    codes = cols.pop("name")
    n = len(codes)
    name = Cat(codes, names or [""]).remove_unused()
    table = build_table(
        {
            **cols,
            "kind": np.full(n, int(Kind.TIMER), np.int8),
            "category": category_of[codes] if n else np.zeros(0, np.int8),
            "name": name,
        },
        DEVICE_COLUMNS,
    )
    return table, ts.op_spans(cols["start_us"], cols["end_us"], cols["step"])
